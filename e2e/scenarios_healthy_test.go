package e2e

import (
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestScenario1HealthyPod: with [bridge(ipam: hostlease), hostlease], a pod
// gets an address; the store's record is committed (the commit marker ran)
// and carries the pod's namespace, name and UID from the CRI metadata;
// stop+remove releases it and the audit log says so.
func TestScenario1HealthyPod(t *testing.T) {
	fullSuiteOnly(t)
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.10.0/24", Marker: true})
	t.Logf("conflist %s: [bridge(ipam: hostlease, dataDir %s), hostlease (commit marker)]", n.File, n.DataDir)

	pod := harness.Pod{Name: "web-0", Namespace: "scenario1", UID: podUID("web-0")}
	id, ip := n.runPod(t, pod)

	recs := n.records(t)
	t.Logf("hostlease-gc list: %s", describe(recs))
	if len(recs) != 1 {
		t.Fatalf("store holds %d records, want exactly 1 for the pod", len(recs))
	}
	r := recs[0]
	checks := []struct{ what, got, want string }{
		{"ip", r.IP.String(), ip},
		{"containerID", r.ContainerID, id},
		{"ifName", r.IfName, "eth0"},
		{"network", r.Network, n.Network},
		{"podNamespace", r.PodNamespace, pod.Namespace},
		{"podName", r.PodName, pod.Name},
		{"podUID", r.PodUID, pod.UID},
		{"state", string(r.State), string(allocator.StateCommitted)},
		{"source", r.Source, "add"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("record %s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if r.Netns == "" || r.Created.IsZero() || r.Committed.Before(r.Created) {
		t.Errorf("record netns %q created %v committed %v: want a netns path and committed >= created", r.Netns, r.Created, r.Committed)
	}
	if p := n.pool(t); p.Used != 1 || p.Free != p.Size-1 || p.Pending != 0 {
		t.Errorf("hostlease-gc status: %+v; want used 1, free size-1, nothing pending", p)
	} else {
		t.Logf("hostlease-gc status: ranges %s size %.0f used %d free %.0f", p.Ranges, p.Size, p.Used, p.Free)
	}

	start := time.Now()
	n.stopRemove(t, id)
	t.Logf("stop+remove took %v", time.Since(start).Round(time.Millisecond))
	if recs := n.records(t); len(recs) != 0 {
		t.Fatalf("store still holds %s after stop+remove", describe(recs))
	}
	if p := n.pool(t); p.Used != 0 || p.Free != p.Size {
		t.Errorf("hostlease-gc status after remove: %+v; want the whole pool free", p)
	}
	evs := n.audit(t)
	if len(evs) != 1 || evs[0].Action != "release" || evs[0].IP.String() != ip || evs[0].ContainerID != id || evs[0].By != "plugin" ||
		evs[0].Pod != pod.Namespace+"/"+pod.Name {
		t.Errorf("audit log %+v; want one plugin release of %s by sandbox %s for %s/%s", evs, ip, id[:12], pod.Namespace, pod.Name)
	} else {
		t.Logf("audit log: %s %s %s by %s (pod %s)", evs[0].Action, evs[0].IP, evs[0].Reason, evs[0].By, evs[0].Pod)
	}
}
