package pool_test

import (
	"fmt"
	"math/big"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/pool"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

func newStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(filepath.Join(t.TempDir(), "net1.db"), store.OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func update(t *testing.T, s *store.Store, fn func(*store.Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func view(t *testing.T, s *store.Store, fn func(*store.Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatal(err)
	}
}

func rec(ip, id, ifname string) *allocator.Record {
	return &allocator.Record{IP: netip.MustParseAddr(ip), ContainerID: id, IfName: ifname, State: allocator.StatePending}
}

// mustGet runs one ADD for id.
func mustGet(t *testing.T, s *store.Store, sets []allocator.StoredRangeSet, id string) {
	t.Helper()
	update(t, s, func(tx *store.Tx) error {
		_, err := allocator.Allocate(tx, allocator.AllocateRequest{Network: "net1", RangeSets: sets,
			Owner: allocator.Owner{ContainerID: id, IfName: "eth0"}, Now: time.Now()})
		if err != nil {
			return err
		}
		return nil
	})
}

func TestUsage(t *testing.T) {
	s := newStore(t)
	gwOutside := rangetest.Set(rangetest.Range("10.2.0.0/28", "10.2.0.4", "10.2.0.8", "10.2.0.1"), rangetest.Range("10.2.1.0/28", "10.2.1.1", "10.2.1.14", "10.2.1.14"))
	big6 := rangetest.Set(rangetest.Range("fd01::/64", "fd01::1", "fd01::ffff:ffff:ffff:ffff", "fd01::1"))
	sets := []allocator.StoredRangeSet{rangetest.Set4, rangetest.Set6, gwOutside, big6}
	mustGet(t, s, sets, "c1")
	mustGet(t, s, sets, "c2")
	update(t, s, func(tx *store.Tx) error {
		for _, r := range []*allocator.Record{
			rec("10.0.0.7", "x", "eth0"),  // in rangetest.Set4's subnet, past rangeEnd
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
	var got []pool.Usage
	view(t, s, func(tx *store.Tx) error { got = pool.Measure(tx, sets); return nil })
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
		mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, fmt.Sprint("fill-", i))
	}
	view(t, s, func(tx *store.Tx) error {
		u := pool.Measure(tx, []allocator.StoredRangeSet{rangetest.Set4})[0]
		if u.Free().Sign() != 0 || u.Used != 5 {
			t.Errorf("full pool: used %d free %v, want 5 and 0", u.Used, u.Free())
		}
		if full := allocator.FullRangeSets(tx, []allocator.StoredRangeSet{rangetest.Set4}); !slices.Equal(full, []int{0}) {
			t.Errorf("full range sets = %v, want [0]", full)
		}
		return nil
	})
}
