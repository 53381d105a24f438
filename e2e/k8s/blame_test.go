package k8s

import (
	"encoding/json"
	"testing"
)

// failureEvents returns ns's Events whose reason means a pod could not be set
// up or torn down (FailedKillPod, FailedCreatePodSandBox).
func failureEvents(t testing.TB, c *Cluster, ns string) []failureEvent {
	t.Helper()
	var list struct {
		Items []failureEvent `json:"items"`
	}
	out := kubectl(t, c, "-n", ns, "get", "events", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get events: %v", err)
	}
	var evs []failureEvent
	for _, ev := range list.Items {
		if ev.Reason == "FailedKillPod" || ev.Reason == "FailedCreatePodSandBox" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// The messages are the shapes kubelet v1.37 and containerd 1.7/2.x write
// (sandbox IDs shortened).
func TestBlamesNetwork(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		want      bool
	}{
		{"shim closed while killing", `error killing pod: [failed to "KillContainer" for "pause" with KillContainerError: "rpc error: code = Unknown desc = failed to kill container \"4f1c\": ttrpc: closed", failed to "KillPodSandbox" for "9a2e" with KillPodSandboxError: "rpc error: code = Unknown desc = ttrpc: closed"]`, false},
		{"sandbox task deadline", `Failed to create pod sandbox: rpc error: code = DeadlineExceeded desc = context deadline exceeded`, false},
		{"DEL failed", `error killing pod: failed to "KillPodSandbox" for "9a2e" with KillPodSandboxError: "rpc error: code = Unknown desc = failed to destroy network for sandbox \"77ab\": plugin type=\"hostlease\" failed (delete): store refused"`, true},
		{"ADD failed in the chain", `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "77ab": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.251.0.2-10.251.0.254`, true},
		{"partial binary", `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "77ab": fork/exec /opt/cni/bin/hostlease: text file busy`, true},
		{"CRI-O CNI add", `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to create pod network sandbox k8s_churn(ns): error adding pod ns_churn to CNI network "hlk8s": plugin type="hostlease" failed (add): code 11`, true},
		{"pull", `Failed to pull image "x": not found`, false},
	} {
		if got := blamesNetwork(tc.msg); got != tc.want {
			t.Errorf("%s: blamesNetwork = %v, want %v\n%s", tc.name, got, tc.want, tc.msg)
		}
	}
	network, runtime := splitBlame([]failureEvent{
		{"FailedKillPod", `failed to kill container "a": ttrpc: closed`},
		{"FailedKillPod", `failed to destroy network for sandbox "b": plugin type="hostlease" failed (delete)`},
	})
	if len(network) != 1 || len(runtime) != 1 || network[0].Message[:9] != "failed to" || runtime[0].Reason != "FailedKillPod" {
		t.Errorf("splitBlame = %v / %v", network, runtime)
	}
}

// The two 403s of the daemon's Event creation as the audit log records them:
// RBAC's and the namespace lifecycle admission's.
func TestRefusedByAuth(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       bool
	}{
		{"namespace terminating", `{"auditID":"a","verb":"create","responseStatus":{"status":"Failure","reason":"Forbidden","details":{"name":"hostlease-","kind":"events","causes":[{"reason":"NamespaceTerminating","message":"namespace e2e-migrate is being terminated","field":"metadata.namespace"}]},"code":403},"annotations":{"authorization.k8s.io/decision":"allow"}}`, false},
		{"rbac", `{"auditID":"b","verb":"create","responseStatus":{"status":"Failure","reason":"Forbidden","code":403},"annotations":{"authorization.k8s.io/decision":"forbid"}}`, true},
		{"403 without annotations", `{"auditID":"c","verb":"list","responseStatus":{"code":403}}`, true},
		{"401", `{"auditID":"d","verb":"list","responseStatus":{"code":401}}`, true},
		{"ok", `{"auditID":"e","verb":"list","responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}`, false},
	} {
		var e auditEvent
		if err := json.Unmarshal([]byte(tc.line), &e); err != nil {
			t.Fatal(err)
		}
		if got := e.refusedByAuth(); got != tc.want {
			t.Errorf("%s: refusedByAuth = %v, want %v", tc.name, got, tc.want)
		}
	}
}
