package daemon

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestReconcile(t *testing.T) {
	sets := testRanges // 10.1.0.10 - 10.1.0.200
	in1, in2 := addr("10.1.0.20"), addr("10.1.0.21")
	outside := addr("192.168.5.5")
	sbS := CRISandbox{ID: "sb-s", State: SandboxReady, PodNamespace: "default", PodName: "s", PodUID: "uid-s"}
	rec := func(ip netip.Addr, owner string) *allocator.Record {
		return &allocator.Record{IP: ip, ContainerID: owner, IfName: "eth0", Created: t0}
	}
	view := func(sbs ...Sandbox) CRIView { return criAt(late, sbs...) }
	type want struct {
		ip       netip.Addr
		reason   string
		conflict bool
	}
	cases := []struct {
		name    string
		uses    []Use
		recs    []*allocator.Record
		damaged []allocator.DamagedRecord
		sets    []allocator.StoredRangeSet
		view    CRIView
		want    []want
	}{
		{name: "held by its user: nothing",
			uses: []Use{{sbS, in1}}, recs: []*allocator.Record{rec(in1, "sb-s")}, sets: sets, view: view(),
			want: nil},
		{name: "unrecorded: re-reserve",
			uses: []Use{{sbS, in1}}, sets: sets, view: view(),
			want: []want{{in1, ReReserveUnrecorded, false}}},
		{name: "recorded for a sandbox CRI does not list: re-reserve",
			uses: []Use{{sbS, in1}}, recs: []*allocator.Record{rec(in1, "sb-gone")}, sets: sets, view: view(),
			want: []want{{in1, ReReserveOtherOwner, false}}},
		{name: "recorded for a NOTREADY sandbox: re-reserve (its DEL releases by owner)",
			uses: []Use{{sbS, in1}}, recs: []*allocator.Record{rec(in1, "sb-old")}, sets: sets,
			view: view(Sandbox{ID: "sb-old", State: SandboxNotReady}),
			want: []want{{in1, ReReserveOtherOwner, false}}},
		{name: "recorded for another READY sandbox: a conflict, not rewritten",
			uses: []Use{{sbS, in1}}, recs: []*allocator.Record{rec(in1, "sb-t")}, sets: sets,
			view: view(Sandbox{ID: "sb-t", State: SandboxReady}),
			want: []want{{in1, ReReserveOtherOwner, true}}},
		{name: "a damaged record there: re-reserve",
			uses: []Use{{sbS, in1}}, damaged: []allocator.DamagedRecord{{IP: in1}}, sets: sets, view: view(),
			want: []want{{in1, ReReserveDamaged, false}}},
		{name: "an address outside the network's ranges is another network's",
			uses: []Use{{sbS, outside}}, sets: sets, view: view(),
			want: nil},
		{name: "unknown range sets: nothing judged",
			uses: []Use{{sbS, in1}}, view: view(),
			want: nil},
		{name: "incomplete CRI answer: nothing judged",
			uses: []Use{{sbS, in1}}, sets: sets, view: CRIView{Why: "down"},
			want: nil},
		{name: "two addresses of one sandbox, reported in address order, once each",
			uses: []Use{{sbS, in2}, {sbS, in1}, {sbS, in2}}, sets: sets, view: view(),
			want: []want{{in1, ReReserveUnrecorded, false}, {in2, ReReserveUnrecorded, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Reconcile(tc.uses, tc.recs, tc.damaged, tc.sets, tc.view)
			var gw []want
			for _, rr := range got {
				gw = append(gw, want{rr.IP, rr.Reason, rr.Conflict})
				if rr.Sandbox.ID != sbS.ID {
					t.Errorf("re-reserve for %s, want %s", rr.Sandbox.ID, sbS.ID)
				}
			}
			if fmt.Sprint(gw) != fmt.Sprint(tc.want) {
				t.Fatalf("Reconcile = %v, want %v", gw, tc.want)
			}
		})
	}
}

// An address a READY sandbox uses without a record is re-reserved for it in
// the store, and the allocator does not hand it out again; one recorded for a
// dead sandbox is taken over; one another READY sandbox holds is reported and
// left alone. PodSandboxStatus is asked once per sandbox.
func TestSweepReReservesUsedAddresses(t *testing.T) {
	e, ghostIP, stolenIP, conflictIP := newUsedAddresses(t)
	nr := e.net(e.sweepAt(t0))
	if len(nr.ReReserved) != 2 {
		t.Fatalf("re-reserved %+v, want 2", nr.ReReserved)
	}
	recs := e.records()
	if r := recs[ghostIP]; r == nil || r.ContainerID != "sb-ghost" || r.State != allocator.StateCommitted || r.PodName != "sb-ghost" {
		t.Fatalf("ghost's address: %+v", r)
	}
	if r := recs[stolenIP]; r == nil || r.ContainerID != "sb-thief" {
		t.Fatalf("address recorded for a dead sandbox: %+v", r)
	}
	if r := recs[conflictIP]; r == nil || r.ContainerID != "sb-holder" {
		t.Fatalf("conflicting address rewritten: %+v", r)
	}
	// The dead sandbox's late DEL releases nothing of the thief's.
	e.release("sb-dead", t0.Add(time.Second))
	if r := e.records()[stolenIP]; r == nil || r.ContainerID != "sb-thief" {
		t.Fatalf("the old owner's DEL released the re-reserved address: %+v", r)
	}
	// A following ADD does not get any address in use.
	got := e.alloc("sb-new", t0.Add(2*time.Second))
	if got.IP == ghostIP || got.IP == stolenIP || got.IP == conflictIP {
		t.Fatalf("ADD got %s, an address in use", got.IP)
	}
	statuses := e.cri.statuses.Load()
	e.sweepAt(t0.Add(time.Minute))
	// sb-ghost and sb-thief are named by records now; sb-twin's answer is
	// cached from the first sweep.
	if n := e.cri.statuses.Load() - statuses; n != 0 {
		t.Fatalf("second sweep asked PodSandboxStatus %d times, want 0", n)
	}
}
