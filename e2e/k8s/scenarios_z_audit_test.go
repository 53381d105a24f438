package k8s

import "testing"

// Runs last (file order): checks the requests of the whole suite.

// Every request the daemon made during the suite is one RBAC grants for the
// reason the code needs it, and none was refused.
func TestAPIRequestsMatchRBAC(t *testing.T) {
	cluster(t)
	reqs := gcRequests(t)
	if len(reqs) == 0 {
		t.Fatal("no requests of the daemon in the audit log")
	}
	for _, e := range reqs {
		res := ""
		if e.ObjectRef != nil {
			res = e.ObjectRef.Resource
		}
		ok := false
		for _, v := range gcAPIGrants[res] {
			ok = ok || v == e.Verb
		}
		if !ok {
			t.Errorf("request %s %s (%s) is outside %v", e.Verb, e.RequestURI, res, gcAPIGrants)
		}
		switch {
		case e.refusedByAuth():
			t.Errorf("request %s %s refused with %d", e.Verb, e.RequestURI, e.ResponseStatus.Code)
		case e.ResponseStatus != nil && e.ResponseStatus.Code == 403:
			t.Logf("request %s %s refused with 403 for its namespace being deleted (not the daemon's rights)", e.Verb, e.RequestURI)
		}
	}
}
