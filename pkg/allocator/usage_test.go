package allocator

import (
	"fmt"
	"testing"
)

func TestFullRangeSets(t *testing.T) {
	s := newStore(t)
	two := set(rng("10.1.0.0/29", "10.1.0.2", "10.1.0.3", "10.1.0.1"), rng("10.1.1.0/29", "10.1.1.2", "10.1.1.3", "10.1.1.3"))
	sets := []StoredRangeSet{set4, set6, two}
	full := func() []int {
		var out []int
		view(t, s, func(tx Store) error { out = FullRangeSets(tx, sets); return nil })
		return out
	}
	eq(t, "fresh", full(), nil)
	for i := range 6 {
		mustGet(t, s, []StoredRangeSet{set6}, fmt.Sprint("v6-", i))
	}
	eq(t, "v6 full", full(), []int{1})
	mustGet(t, s, []StoredRangeSet{two}, "t1")
	mustGet(t, s, []StoredRangeSet{two}, "t2")
	eq(t, "two ranges, one free address left", full(), []int{1})
	mustGet(t, s, []StoredRangeSet{two}, "t3") // 10.1.1.3 is the gateway
	eq(t, "v6 and two-range set full", full(), []int{1, 2})
	release(t, s, "v6-3", "eth0")
	eq(t, "after a release", full(), []int{2})
}
