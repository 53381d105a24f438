package reclaim

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestReconcile(t *testing.T) {
	sets := testRanges // 10.1.0.10 - 10.1.0.200
	in1, in2 := addr("10.1.0.20"), addr("10.1.0.21")
	outside := addr("192.168.5.5")
	sbS := PodSandbox{ID: "sb-s", State: SandboxReady, PodNamespace: "default", PodName: "s", PodUID: "uid-s"}
	rec := func(ip netip.Addr, owner string) *allocator.Record {
		return &allocator.Record{IP: ip, ContainerID: owner, IfName: "eth0", Created: t0}
	}
	view := func(sbs ...PodSandbox) CRIView { return criAt(late, sbs...) }
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
			view: view(PodSandbox{ID: "sb-old", State: SandboxNotReady}),
			want: []want{{in1, ReReserveOtherOwner, false}}},
		{name: "recorded for another READY sandbox: a conflict, not rewritten",
			uses: []Use{{sbS, in1}}, recs: []*allocator.Record{rec(in1, "sb-t")}, sets: sets,
			view: view(PodSandbox{ID: "sb-t", State: SandboxReady}),
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
