package k8s

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// auditEvent is one apiserver audit log entry (audit.k8s.io/v1 Event, the
// fields used here).
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int `json:"code"`
		Details *struct {
			Causes []struct {
				Reason string `json:"reason"`
			} `json:"causes"`
		} `json:"details"`
	} `json:"responseStatus"`
	Annotations              map[string]string `json:"annotations"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
}

// gcRequests returns the daemon's requests in the audit log (one per
// auditID; the policy logs nothing else).
func gcRequests(t testing.TB) []auditEvent {
	t.Helper()
	f, err := os.Open(AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	// The log holds every request of the suite; only lines that name the
	// daemon's account can be its requests, and only those are decoded
	// (this is read by polls).
	account := []byte(`"` + gcServiceAccount + `"`)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), account) {
			continue
		}
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.User.Username != gcServiceAccount {
			continue
		}
		if i, ok := seen[e.AuditID]; ok {
			if e.ResponseStatus != nil {
				out[i].ResponseStatus = e.ResponseStatus
			}
			if e.Annotations != nil {
				out[i].Annotations = e.Annotations
			}
			continue
		}
		seen[e.AuditID] = len(out)
		out = append(out, e)
	}
	return out
}

// refusedByAuth reports whether the API server refused e for who made it:
// not authenticated (401), or an authorization decision "forbid" (RBAC). A
// 403 an admission plugin gives for a namespace being deleted
// (NamespaceTerminating: an Event about a pod whose namespace a test is
// removing) refuses the object, not the daemon, and is not one.
func (e auditEvent) refusedByAuth() bool {
	rs := e.ResponseStatus
	if rs == nil {
		return false
	}
	if rs.Code == 401 || e.Annotations["authorization.k8s.io/decision"] == "forbid" {
		return true
	}
	if rs.Code != 403 {
		return false
	}
	if rs.Details != nil {
		for _, c := range rs.Details.Causes {
			if c.Reason == "NamespaceTerminating" {
				return false
			}
		}
	}
	return true
}
