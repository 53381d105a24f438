package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/reclaim"
	corev1 "k8s.io/api/core/v1"
)

// What sweeps report in Events, logs and metrics, for the scenarios whose
// writes sweep_act_test.go and sweep_write_test.go check.

func TestSweepReportsLeaksAfterMisses(t *testing.T) {
	s := newLeaks(t)
	e := s.e
	for i := range 2 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if got := e.metric("hostlease_leak_candidates", "network", testNet); got != 2 {
			t.Fatalf("sweep %d: leak candidates %v, want 2", i+1, got)
		}
		if evs := e.events(); len(evs) != 0 {
			t.Fatalf("sweep %d posted events before reclaiming: %+v", i+1, evs)
		}
	}
	e.sweepAt(t0.Add(2 * time.Minute)) // reclaims both leaks

	evs := e.events()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Reason != "AddressReclaimed" || ev.Type != corev1.EventTypeNormal || ev.Source.Component != "hostlease-gc" || ev.Source.Host != "node1" {
			t.Errorf("event %+v", ev)
		}
		switch {
		case strings.Contains(ev.Message, s.leakPod.IP.String()+" "):
			o := ev.InvolvedObject
			if o.Kind != "Pod" || o.Name != "web-0" || o.Namespace != "default" || o.UID != "uid-web-0" || ev.Namespace != "default" {
				t.Errorf("event for the leak of a live pod is on %+v (ns %s), want the pod", o, ev.Namespace)
			}
		case strings.Contains(ev.Message, s.leakGone.IP.String()+" "):
			if o := ev.InvolvedObject; o.Kind != "Node" || o.Name != "node1" {
				t.Errorf("event for the leak of a gone pod is on %+v, want node node1", o)
			}
		default:
			t.Errorf("event names neither leak: %q", ev.Message)
		}
		if !strings.Contains(ev.Message, testNet) {
			t.Errorf("event message %q does not name the network", ev.Message)
		}
	}

	checks := []struct {
		name  string
		pairs []any
		want  float64
	}{
		{"hostlease_reclaims_total", []any{"network", testNet, "reason", reclaim.ReleaseSandboxAbsent}, 2},
		{"hostlease_reclaims_total", []any{"network", testNet, "reason", reclaim.ReleaseNetnsGone}, 0},
		{"hostlease_leak_candidates", []any{"network", testNet}, 0},
		{"hostlease_allocations", []any{"network", testNet, "state", StateCommitted}, 1},
		{"hostlease_allocations", []any{"network", testNet, "state", StatePending}, 0},
		{"hostlease_pool_size_addresses", []any{"network", testNet, "range_set", "0"}, 191},
		{"hostlease_pool_free_addresses", []any{"network", testNet, "range_set", "0"}, 190},
		{"hostlease_sweeps_total", []any{"result", SweepOK}, 3},
		{"hostlease_sweeps_total", []any{"result", SweepCRIError}, 0},
		{"hostlease_cri_up", nil, 1},
		{"hostlease_vetoes_total", []any{"network", testNet, "reason", VetoPodListsIP}, 0},
	}
	for _, c := range checks {
		if got := e.metric(c.name, c.pairs...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.pairs, got, c.want)
		}
	}
	if ts := e.metric("hostlease_last_successful_sweep_timestamp_seconds"); ts <= 0 {
		t.Errorf("last successful sweep timestamp %v", ts)
	}

	// Nothing is counted or posted twice.
	e.sweepAt(t0.Add(3 * time.Minute))
	if got := e.reclaims(reclaim.ReleaseSandboxAbsent); got != 2 || len(e.events()) != 2 {
		t.Fatalf("after a further sweep: reclaims %v, events %d; want 2 each", got, len(e.events()))
	}
}

func TestSweepReportsReclaimReasons(t *testing.T) {
	e := newSweepEnv(t)
	e.allocNetns("sb-gone", t0.Add(-10*time.Second), filepath.Join(e.netns, "cni-gone"))
	e.alloc("sb-young", t0.Add(-10*time.Second)) // absent, no proof, too young
	for i := range 10 {
		e.sweepAt(t0.Add(time.Duration(i) * 15 * time.Second))
	}
	if got := e.reclaims(reclaim.ReleaseNetnsGone); got != 1 {
		t.Errorf("reclaims{netns_gone} = %v, want 1", got)
	}
	if got := e.reclaims(reclaim.ReleaseSandboxAbsent); got != 0 {
		t.Errorf("reclaims{sandbox_absent} = %v, want 0", got)
	}
}

func TestSweepReportsVetoes(t *testing.T) {
	e, leak := newVetoed(t)
	for i := range 5 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
	}
	// Sweeps 3, 4 and 5 were due and vetoed.
	if got := e.metric("hostlease_vetoes_total", "network", testNet, "reason", VetoPodListsIP); got != 3 {
		t.Fatalf("vetoes{pod_lists_ip} = %v, want 3", got)
	}
	if got := e.reclaims(reclaim.ReleaseSandboxAbsent); got != 0 || len(e.events()) != 0 {
		t.Fatalf("vetoed record: reclaims %v, events %d", got, len(e.events()))
	}
	// The pod completes: the reclaim's Event is on it.
	e.addPod("web-0", "uid-web-0", corev1.PodSucceeded, leak.IP)
	e.sweepAt(t0.Add(5 * time.Minute))
	if evs := e.events(); len(evs) != 1 || evs[0].InvolvedObject.Kind != "Pod" || evs[0].InvolvedObject.Name != "web-0" {
		t.Fatalf("events %+v, want one on pod web-0", evs)
	}
	if got := e.metric("hostlease_vetoes_total", "network", testNet, "reason", VetoPodListsIP); got != 3 {
		t.Fatalf("vetoes{pod_lists_ip} = %v after the reclaim, want still 3", got)
	}
}

func TestSweepReportsCRIOutage(t *testing.T) {
	s := newCRIOutage(t)
	e := s.e
	e.cri.setListErr(errOutage)
	for i := range 5 {
		e.sweepAt(t0.Add(time.Duration(2+i) * time.Minute))
	}
	if got := e.metric("hostlease_cri_up"); got != 0 {
		t.Errorf("cri_up = %v during the outage", got)
	}
	if got := e.metric("hostlease_sweeps_total", "result", SweepCRIError); got != 5 {
		t.Errorf("sweeps{cri_error} = %v, want 5", got)
	}
	if got := e.metric("hostlease_leak_candidates", "network", testNet); got != 1 {
		t.Errorf("leak candidates during the outage = %v, want 1 (an outage is not a sighting)", got)
	}
	e.cri.setListErr(nil)
	e.sweepAt(t0.Add(11 * time.Minute))
	if got := e.metric("hostlease_cri_up"); got != 1 {
		t.Errorf("cri_up = %v after recovery", got)
	}
	if got := e.metric("hostlease_sweeps_total", "result", SweepOK); got != 3 {
		t.Errorf("sweeps{ok} = %v, want 3", got)
	}
}

func TestSweepReportsCommits(t *testing.T) {
	e, _, _, _ := newPendingRecords(t)
	e.sweepAt(t0)
	if c, p := e.metric("hostlease_allocations", "network", testNet, "state", StateCommitted), e.metric("hostlease_allocations", "network", testNet, "state", StatePending); c != 1 || p != 2 {
		t.Fatalf("allocations committed=%v pending=%v, want 1 and 2", c, p)
	}
}

func TestSweepReportsDryRun(t *testing.T) {
	s := newDryRun(t)
	e := s.e
	for i := range 5 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
	}
	if !strings.Contains(e.logs.String(), "would reclaim address (dry run)") || !strings.Contains(e.logs.String(), s.leak.IP.String()) {
		t.Errorf("dry run did not log what it would reclaim:\n%s", e.logs.String())
	}
	if len(e.events()) != 0 || e.reclaims(reclaim.ReleaseSandboxAbsent) != 0 || e.metric("hostlease_stores_rebuilt_total", "network", "broken") != 0 {
		t.Fatalf("dry run posted events (%d) or counted reclaims/rebuilds", len(e.events()))
	}
	if got := e.metric("hostlease_allocations", "network", testNet, "state", StatePending); got != 2 {
		t.Errorf("dry run: allocations{pending} = %v, want 2 (nothing was committed)", got)
	}
	if got := e.metric("hostlease_leak_candidates", "network", testNet); got != 1 {
		t.Errorf("dry run: leak candidates = %v, want 1", got)
	}
}

func TestSweepReportsMassReclaimGuard(t *testing.T) {
	e, _ := newGuarded(t)
	for i := range 4 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
	}
	if got := e.metric("hostlease_reclaim_guard_tripped_total", "network", testNet); got != 2 {
		t.Errorf("guard tripped %v times, want 2 (sweeps 3 and 4)", got)
	}
	if got := e.metric("hostlease_vetoes_total", "network", testNet, "reason", VetoMassReclaimGuard); got != 8 {
		t.Errorf("vetoes{mass_reclaim_guard} = %v, want 8", got)
	}
	var warned int
	for _, ev := range e.events() {
		if ev.Reason == "MassReclaimRefused" && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Node" {
			warned++
		}
	}
	if warned != 2 {
		t.Errorf("%d MassReclaimRefused events, want 2: %+v", warned, e.events())
	}
}

// The Event about the reclaim of a StatefulSet pod's predecessor is not
// pinned on the new pod of the same name, which never had that address.
func TestSweepReportsNameReuseOnTheNode(t *testing.T) {
	e, _, _ := newNameReuse(t)
	for i := range 3 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
	}
	evs := e.events()
	if len(evs) != 1 {
		t.Fatalf("events %+v, want 1", evs)
	}
	if o := evs[0].InvolvedObject; o.Kind != "Node" || o.Name != "node1" {
		t.Fatalf("reclaim Event on %+v, want the node (the pod named web-0 now is another pod)", o)
	}
}

func TestSweepReportsNoReclaimOfAReallocatedAddress(t *testing.T) {
	for _, tc := range reallocations {
		t.Run(tc.name, func(t *testing.T) {
			e, _, _ := reallocated(t, tc.newID)
			if len(e.events()) != 0 || e.reclaims(reclaim.ReleaseSandboxAbsent) != 0 {
				t.Fatalf("a reclaim was reported: events %d, reclaims %v", len(e.events()), e.reclaims(reclaim.ReleaseSandboxAbsent))
			}
		})
	}
}

func TestSweepReportsReReservations(t *testing.T) {
	e, _, _, _ := newUsedAddresses(t)
	e.sweepAt(t0)
	if got := e.metric("hostlease_addresses_rereserved_total", "network", testNet, "reason", reclaim.ReReserveUnrecorded); got != 1 {
		t.Errorf("rereserved{unrecorded} = %v", got)
	}
	if got := e.metric("hostlease_addresses_rereserved_total", "network", testNet, "reason", reclaim.ReReserveOtherOwner); got != 1 {
		t.Errorf("rereserved{other_owner} = %v", got)
	}
	if got := e.metric("hostlease_address_conflicts_total", "network", testNet); got != 1 {
		t.Errorf("conflicts = %v", got)
	}
	reasons := map[string]int{}
	for _, ev := range e.events() {
		reasons[ev.Reason+"/"+ev.Type]++
	}
	if reasons["AddressReReserved/Warning"] != 2 || reasons["AddressConflict/Warning"] != 1 {
		t.Errorf("events %v", reasons)
	}
}
