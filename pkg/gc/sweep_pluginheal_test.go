package gc

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// addSandbox is the plugin's ADD for sandbox id of pod (default/name, uid)
// with a netns file in the env's netns dir, created first as the runtime
// does, and the plugin's view of it (so it frees the pod's dead sandboxes).
func (e *sweepEnv) addSandbox(id, name, uid string, at time.Time) {
	e.t.Helper()
	netns := filepath.Join(e.netns, "cni-"+id)
	if err := os.WriteFile(netns, nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
	owner := allocator.Owner{ContainerID: id, IfName: "eth0", Netns: netns, NetnsWitness: allocator.WitnessNetns(netns),
		PodNamespace: "default", PodName: name, PodUID: uid}
	st, err := store.Open(e.path, store.OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(func(tx *store.Tx) error {
		_, cerr := allocator.Allocate(tx, allocator.AllocateRequest{Network: testNet, RangeSets: e.ranges, Owner: owner, Now: at, View: allocator.OSNetnsView{}})
		if cerr != nil {
			return cerr
		}
		return nil
	}); err != nil {
		e.t.Fatalf("ADD %s: %v", id, err)
	}
}

// The plugin's release of a pod's dead sandbox is reported by the next
// sweep, once: an AddressReleasedByPlugin Event on the pod, the metric by
// reason, a log line.
func TestSweepReportsPluginReleases(t *testing.T) {
	e := newSweepEnv(t)
	e.addPod("crashy", "uid-crashy", corev1.PodRunning)
	e.addSandbox("s1", "crashy", "uid-crashy", t0)
	if err := os.Remove(filepath.Join(e.netns, "cni-s1")); err != nil {
		t.Fatal(err)
	}
	e.addSandbox("s2", "crashy", "uid-crashy", t0.Add(time.Second))
	for _, r := range e.records() {
		if r.ContainerID != "s2" {
			t.Fatalf("the plugin kept %s's address %s", r.ContainerID, r.IP)
		}
	}

	for i := range 2 {
		e.sweepAt(t0.Add(time.Duration(i+1) * time.Second))
		evs := e.events()
		if len(evs) != 1 {
			t.Fatalf("sweep %d: %d events, want the one of the first sweep: %+v", i+1, len(evs), evs)
		}
		ev := evs[0]
		if ev.Reason != EventAddressReleasedByPlugin || ev.Type != corev1.EventTypeNormal ||
			ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != "crashy" || string(ev.InvolvedObject.UID) != "uid-crashy" {
			t.Errorf("event %+v, want AddressReleasedByPlugin on pod default/crashy", ev)
		}
		if got := e.metric("hostlease_plugin_releases_total", "network", testNet, "reason", allocator.ReasonPodSandboxReplaced); got != 1 {
			t.Errorf("sweep %d: hostlease_plugin_releases_total{reason=pod_sandbox_replaced} = %v, want 1", i+1, got)
		}
		if got := e.metric("hostlease_plugin_releases_total", "network", testNet, "reason", allocator.ReasonNetnsGoneAtExhaustion); got != 0 {
			t.Errorf("sweep %d: hostlease_plugin_releases_total{reason=netns_gone_at_exhaustion} = %v, want 0", i+1, got)
		}
	}
}
