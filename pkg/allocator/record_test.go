package allocator

import (
	"net/netip"
	"testing"
	"time"
)

// SameAllocation tells a record as it is now from one read earlier: only a
// release and a new reservation change the address, the attachment or the
// creation instant; everything else changes during one allocation's life.
func TestSameAllocation(t *testing.T) {
	base := rec("10.0.0.2", "c1", "eth0")
	cases := []struct {
		name   string
		change func(r *Record)
		same   bool
	}{
		{"unchanged", func(*Record) {}, true},
		{"committed since", func(r *Record) { r.State, r.Committed = StateCommitted, base.Created.Add(time.Second) }, true},
		{"observed by the daemon", func(r *Record) { r.Obs = Observation{Misses: 2, Verdict: "absent"} }, true},
		{"pod details filled in", func(r *Record) { r.PodNamespace, r.PodName, r.PodUID = "ns", "p", "u" }, true},
		{"creation instant in another zone", func(r *Record) { r.Created = r.Created.In(time.FixedZone("X", 3600)) }, true},
		{"another address", func(r *Record) { r.IP = netip.MustParseAddr("10.0.0.3") }, false},
		{"another container", func(r *Record) { r.ContainerID = "c2" }, false},
		{"another ifname", func(r *Record) { r.IfName = "net1" }, false},
		{"reserved again later by the same attachment", func(r *Record) { r.Created = r.Created.Add(time.Nanosecond) }, false},
	}
	for _, tc := range cases {
		now := *base
		tc.change(&now)
		if got := SameAllocation(base, &now); got != tc.same {
			t.Errorf("%s: SameAllocation = %v, want %v", tc.name, got, tc.same)
		}
		if got := SameAllocation(&now, base); got != tc.same {
			t.Errorf("%s (swapped): SameAllocation = %v, want %v", tc.name, got, tc.same)
		}
	}
}
