package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

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

// A plugin release is reported at least once: the store's reported mark
// (audit_reported) is saved only after its Event was posted. An Event that
// fails is posted by a later sweep, or by the next daemon if this one stops
// first; a daemon stopped between posting and saving the mark reports it
// again (a repeated Event, never a lost one).
func TestSweepReportsPluginReleasesAtLeastOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool // the daemon stops after the failed Event; a new one sweeps
	}{
		{"PostedAgainBySameDaemon", false},
		{"PostedAgainAfterRestart", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSweepEnv(t)
			var failing atomic.Bool
			var markAtPost []uint64
			e.client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
				var mark uint64
				e.view(func(tx *store.Tx) error { mark = tx.AuditReported(); return nil })
				markAtPost = append(markAtPost, mark)
				if failing.Load() {
					return true, nil, errors.New("the API server is unreachable")
				}
				return false, nil, nil
			})
			e.addPod("crashy", "uid-crashy", corev1.PodRunning)
			e.addSandbox("s1", "crashy", "uid-crashy", t0)
			if err := os.Remove(filepath.Join(e.netns, "cni-s1")); err != nil {
				t.Fatal(err)
			}
			e.addSandbox("s2", "crashy", "uid-crashy", t0.Add(time.Second))
			mark := func() (m uint64) {
				e.view(func(tx *store.Tx) error { m = tx.AuditReported(); return nil })
				return m
			}

			failing.Store(true)
			e.sweepAt(t0.Add(time.Second))
			if n := len(e.events()); n != 0 {
				t.Fatalf("%d events posted by a failing API server", n)
			}
			if m := mark(); m != 0 {
				t.Errorf("the release is marked reported (audit_reported %d) though its Event was not posted", m)
			}
			if tc.restart {
				e.restartSweeper()
			}
			failing.Store(false)
			e.sweepAt(t0.Add(2 * time.Second))
			evs := e.events()
			if len(evs) != 1 || evs[0].Reason != EventAddressReleasedByPlugin {
				t.Fatalf("after the API server is back: events %+v, want the one AddressReleasedByPlugin", evs)
			}
			if m := mark(); m == 0 {
				t.Error("the release is not marked reported after its Event was posted")
			}
			if got := e.metric("hostlease_plugin_releases_total", "network", testNet, "reason", allocator.ReasonPodSandboxReplaced); got != 1 {
				t.Errorf("hostlease_plugin_releases_total{reason=pod_sandbox_replaced} = %v, want 1 (each release counted once)", got)
			}
			// Every post happened before the mark covering it was saved.
			for i, m := range markAtPost {
				if m != 0 {
					t.Errorf("Event post %d: audit_reported was already %d: the mark is saved before the Event is sent", i, m)
				}
			}
			e.sweepAt(t0.Add(3 * time.Second))
			if n := len(e.events()); n != 1 {
				t.Errorf("a later sweep posted the Event again: %d events", n)
			}
		})
	}
}

// restartSweeper replaces the env's sweeper by a new one, as a restarted
// daemon: nothing kept in memory, a new metrics registry.
func (e *sweepEnv) restartSweeper() {
	e.reg = prometheus.NewRegistry()
	e.m = NewMetrics(e.reg)
	old := e.s
	e.s = &Sweeper{Opts: old.Opts, CRI: e.cri, Kube: NewKube(e.client, "node1"), Metrics: e.m, Log: old.Log, Now: old.Now, Boot: old.Boot}
}
