package reclaim

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestMergeRebuild is the rebuild's content as a table: who claims an
// address first, and what each source becomes.
func TestMergeRebuild(t *testing.T) {
	ip := netip.MustParseAddr
	sb := func(id string) PodSandbox {
		return PodSandbox{ID: id, State: SandboxReady, PodNamespace: "ns", PodName: id, PodUID: "uid-" + id}
	}
	old := func(a, id string) *allocator.Record {
		return &allocator.Record{IP: ip(a), ContainerID: id, IfName: "eth0", State: allocator.StateCommitted, Source: "add"}
	}
	type want struct {
		ip, owner, source string
		state             allocator.State
	}
	cases := []struct {
		name         string
		in           RebuildInput
		want         []want
		unattributed []string
		why          string
	}{
		{"the runtime wins over an old record of the same address; old records of unlisted sandboxes are kept",
			RebuildInput{Sets: testRanges, Sandboxes: []SandboxAddrs{{sb("a"), []netip.Addr{ip("10.1.0.20"), ip("192.168.9.9")}}},
				Listed: map[string]bool{"a": true}, Old: Salvage{Records: []*allocator.Record{old("10.1.0.20", "gone"), old("10.1.0.21", "gone")}}},
			[]want{{"10.1.0.20", "a", "rebuild", allocator.StateCommitted}, {"10.1.0.21", "gone", "add", allocator.StateCommitted}}, nil,
			"rebuilt 2 records: 1 from CRI, 1 kept from the old store, 0 damaged ones kept reserved"},
		{"damaged records keep their address for a listed owner, for nobody otherwise; unreadable addresses for nobody",
			RebuildInput{Listed: map[string]bool{"a": true}, Old: Salvage{Sets: testRanges,
				Damaged:    []allocator.DamagedRecord{{IP: ip("10.1.0.30"), ContainerID: "a", IfName: "eth0"}, {IP: ip("10.1.0.31"), ContainerID: "x"}, {}},
				Unreadable: []netip.Addr{ip("10.1.0.30"), ip("10.1.0.32")}}},
			[]want{{"10.1.0.30", "a", "rebuild-damaged", allocator.StatePending}, {"10.1.0.31", "", "rebuild-damaged", allocator.StatePending},
				{"10.1.0.32", "", "rebuild-unreadable-page", allocator.StatePending}}, []string{"10.1.0.31", "10.1.0.32"},
			"rebuilt 3 records: 0 from CRI, 0 kept from the old store, 3 damaged ones kept reserved; owner unknown (kept reserved, reclaimed by the usual rules unless a sandbox uses them): [10.1.0.31 10.1.0.32]"},
		{"without known range sets every address of the runtime is taken, once",
			RebuildInput{Sandboxes: []SandboxAddrs{{sb("a"), []netip.Addr{ip("192.168.9.9")}}, {sb("b"), []netip.Addr{ip("192.168.9.9")}}}},
			[]want{{"192.168.9.9", "a", "rebuild", allocator.StateCommitted}}, nil,
			"rebuilt 1 records: 1 from CRI, 0 kept from the old store, 0 damaged ones kept reserved"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := MergeRebuild(tc.in)
			var gw []want
			for _, r := range got.Records {
				gw = append(gw, want{r.IP.String(), r.ContainerID, r.Source, r.State})
			}
			if !slices.Equal(gw, tc.want) {
				t.Errorf("records %v, want %v", gw, tc.want)
			}
			if !slices.Equal(got.Unattributed, tc.unattributed) {
				t.Errorf("unattributed %v, want %v", got.Unattributed, tc.unattributed)
			}
			if w := got.Why(); w != tc.why {
				t.Errorf("why %q, want %q", w, tc.why)
			}
		})
	}
}
