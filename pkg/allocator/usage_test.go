package allocator

import (
	"fmt"
	"math/big"
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

func TestUsage(t *testing.T) {
	s := newStore(t)
	gwOutside := set(rng("10.2.0.0/28", "10.2.0.4", "10.2.0.8", "10.2.0.1"), rng("10.2.1.0/28", "10.2.1.1", "10.2.1.14", "10.2.1.14"))
	big6 := set(rng("fd01::/64", "fd01::1", "fd01::ffff:ffff:ffff:ffff", "fd01::1"))
	sets := []StoredRangeSet{set4, set6, gwOutside, big6}
	mustGet(t, s, sets, "c1")
	mustGet(t, s, sets, "c2")
	update(t, s, func(tx Store) error {
		for _, r := range []*Record{
			rec("10.0.0.7", "x", "eth0"),  // in set4's subnet, past rangeEnd
			rec("10.2.0.2", "x", "eth0"),  // in gwOutside's subnet, before rangeStart
			rec("10.0.1.1", "x", "eth0"),  // in no range set
			rec("fd01::1", "x", "eth0"),   // big6's gateway, reserved under an older config
			rec("10.2.1.14", "x", "eth1"), // gwOutside's second gateway, likewise
		} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	var got []PoolUsage
	view(t, s, func(tx Store) error { got = Usage(tx, sets); return nil })
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	want := []struct {
		desc string
		size *big.Int
		used int
		free *big.Int
	}{
		{"10.0.0.1-10.0.0.6", big.NewInt(5), 2, big.NewInt(3)},
		{"fd00::1-fd00::7", big.NewInt(6), 2, big.NewInt(4)},
		{"10.2.0.4-10.2.0.8,10.2.1.1-10.2.1.14", big.NewInt(5 + 13), 2, big.NewInt(16)},
		// Exact: 2^64-4, which a float64 would round to 2^64.
		{"fd01::1-fd01::ffff:ffff:ffff:ffff", new(big.Int).Sub(two64, big.NewInt(2)), 2, new(big.Int).Sub(two64, big.NewInt(4))},
	}
	if len(got) != len(want) {
		t.Fatalf("Usage returned %d pools", len(got))
	}
	for i, w := range want {
		g := got[i]
		if g.RangeSet != i || g.Desc != w.desc || g.Size.Cmp(w.size) != 0 || g.Used != w.used || g.Free().Cmp(w.free) != 0 {
			t.Errorf("pool %d = {%d %q size %v used %d free %v}, want {%q size %v used %d free %v}",
				i, g.RangeSet, g.Desc, g.Size, g.Used, g.Free(), w.desc, w.size, w.used, w.free)
		}
	}
	// A full pool reports zero free, never a negative count.
	for i := range 3 {
		mustGet(t, s, []StoredRangeSet{set4}, fmt.Sprint("fill-", i))
	}
	view(t, s, func(tx Store) error {
		u := Usage(tx, []StoredRangeSet{set4})[0]
		if u.Free().Sign() != 0 || u.Used != 5 {
			t.Errorf("full pool: used %d free %v, want 5 and 0", u.Used, u.Free())
		}
		eq(t, "full range sets", FullRangeSets(tx, []StoredRangeSet{set4}), []int{0})
		return nil
	})
}
