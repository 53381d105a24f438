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
		if e.ResponseStatus != nil && (e.ResponseStatus.Code == 401 || e.ResponseStatus.Code == 403) {
			t.Errorf("request %s %s refused with %d", e.Verb, e.RequestURI, e.ResponseStatus.Code)
		}
	}
}
