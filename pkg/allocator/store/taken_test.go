package store

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// TestTakenIndexFollowsRecords: the bitmap the address choice reads holds
// exactly the reserved addresses through puts, overwrites and deletes, and a
// store that lost it gets it rebuilt from the records on open.
func TestTakenIndexFollowsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	err = s.Update(func(tx *Tx) error {
		for _, ip := range []netip.Addr{a, b, a} { // a twice: an overwrite
			if err := tx.Put(&allocator.Record{IP: ip, ContainerID: "c", IfName: "eth0"}); err != nil {
				return err
			}
		}
		if !tx.Taken(a) || !tx.Taken(b) || tx.Count() != 2 {
			t.Errorf("after puts: Taken(a)=%v Taken(b)=%v Count=%d, want true true 2", tx.Taken(a), tx.Taken(b), tx.Count())
		}
		if _, err := tx.remove(a); err != nil {
			return err
		}
		if tx.Taken(a) || !tx.Taken(b) || tx.Count() != 1 {
			t.Errorf("after delete: Taken(a)=%v Taken(b)=%v Count=%d, want false true 1", tx.Taken(a), tx.Taken(b), tx.Count())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Damage: drop the index, then reopen.
	if err := s.db.Update(func(btx *bolt.Tx) error { return btx.DeleteBucket(bucketTaken) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.View(func(tx *Tx) error {
		if !tx.Taken(b) || tx.Count() != 1 {
			t.Errorf("after the rebuild: Taken(b)=%v Count=%d, want true 1", tx.Taken(b), tx.Count())
		}
		return nil
	})
}

// Damaged bitmap blocks (cut short, under a key that is no block's) never
// panic an ADD, never hand out a held address, and are rewritten by the repair.
func TestDamagedBitmapBlocks(t *testing.T) {
	cases := map[string]func(tx *Tx) error{
		"block cut short": func(tx *Tx) error {
			k, _ := blockOf(netip.MustParseAddr("10.0.0.2"))
			return tx.taken.Put(k, []byte{0x02})
		},
		"block emptied": func(tx *Tx) error {
			k, _ := blockOf(netip.MustParseAddr("10.0.0.2"))
			return tx.taken.Put(k, []byte{})
		},
		"stray key":   func(tx *Tx) error { return tx.taken.Put([]byte{4, 10, 0, 0, 3}, make([]byte, blockBytes)) },
		"garbage key": func(tx *Tx) error { return tx.taken.Put([]byte("xyz"), []byte{0xff}) },
	}
	for name, dmg := range cases {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, id)
			}
			update(t, s, func(tx *Tx) error { return tx.meta.Delete(lastReservedKey(0)) })
			damage(t, s, dmg)
			got := mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "d")
			if slices.Contains([]string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, got[0]) {
				t.Fatalf("ADD handed out %s, held by another container", got[0])
			}
			update(t, s, func(tx *Tx) error { _, err := tx.RepairIndexes("test", testTime); return err })
			consistent(t, s)
			view(t, s, func(tx *Tx) error {
				return tx.taken.ForEach(func(k, v []byte) error {
					if len(v) != blockBytes {
						t.Errorf("block %x still %d bytes after the repair", k, len(v))
					}
					return nil
				})
			})
		})
	}
}

// A lost bit in the taken bitmap never hands out a held address: ADD checks
// its candidate against the records, repairs the indexes and audits it.
func TestAllocateNeverTakesARecordedAddress(t *testing.T) {
	cases := []struct {
		name  string
		clear []string // bits to clear
	}{
		{"one bit of the next candidate", []string{"10.0.0.3"}},
		{"every bit", []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}},
		{"bits of two candidates in a row", []string{"10.0.0.3", "10.0.0.4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, id)
			}
			// Free .2 so round robin (last reserved .4) moves on to .5, then
			// wraps; reset the round-robin point so the next ADD starts at .2.
			update(t, s, func(tx *Tx) error { return tx.meta.Delete(lastReservedKey(0)) })
			damage(t, s, func(tx *Tx) error {
				for _, ip := range tc.clear {
					if err := (takenBits{tx.taken}).set(netip.MustParseAddr(ip), false); err != nil {
						return err
					}
				}
				return nil
			})
			got := mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "d")
			if slices.Contains([]string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, got[0]) {
				t.Fatalf("ADD handed out %s, held by another container", got[0])
			}
			if got[0] != "10.0.0.5" {
				t.Errorf("ADD got %s, want 10.0.0.5 (the first address without a record)", got[0])
			}
			for _, id := range []string{"a", "b", "c", "d"} {
				if len(held(t, s, id, "eth0")) != 1 {
					t.Errorf("%s lost its record", id)
				}
			}
			consistent(t, s)
			if acts := auditActions(t, s); !slices.Contains(acts, allocator.AuditIndexRepair) {
				t.Errorf("no %s audit event: %v", allocator.AuditIndexRepair, acts)
			}
		})
	}
}

// A requested address with a record is unavailable even when its bit is lost.
func TestAllocateRequestedChecksTheRecord(t *testing.T) {
	s := newStore(t)
	mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "a", "10.0.0.4")
	damage(t, s, func(tx *Tx) error { return takenBits{tx.taken}.set(netip.MustParseAddr("10.0.0.4"), false) })
	r := alloc(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "b", "eth0", "10.0.0.4")
	if r.err == nil || r.err.Code != allocator.ErrAddressUnavailable {
		t.Fatalf("requesting a recorded address whose bit was lost: %v %v", r.ips(), r.err)
	}
	if got := held(t, s, "a", "eth0"); !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Errorf("the holder's record: %v", got)
	}
	consistent(t, s)
}

// indexesAgree is the gate of the fallback scan: it must say no for each
// kind of disagreement and yes for a consistent store.
func TestIndexesAgree(t *testing.T) {
	a3 := netip.MustParseAddr("10.0.0.3")
	cases := []struct {
		name   string
		damage func(tx *Tx) error
		want   bool
	}{
		{"consistent", func(*Tx) error { return nil }, true},
		{"owner entry lost", func(tx *Tx) error {
			return tx.owners.Delete(append(ownerPrefix(allocator.Attachment{ContainerID: "b", IfName: "eth0"}), addrKey(a3)...))
		}, false},
		{"stray owner entry", func(tx *Tx) error {
			return tx.owners.Put(append(ownerPrefix(allocator.Attachment{ContainerID: "x", IfName: "eth0"}), addrKey(a3)...), nil)
		}, false},
		{"bit lost", func(tx *Tx) error { return takenBits{tx.taken}.set(a3, false) }, false},
		{"stray bit", func(tx *Tx) error { return takenBits{tx.taken}.set(netip.MustParseAddr("10.0.0.6"), true) }, false},
		{"count absent", func(tx *Tx) error { return tx.meta.Delete(keyRecords) }, false},
		{"count wrong", func(tx *Tx) error { return tx.setRecordCount(7) }, false},
		{"record lost", func(tx *Tx) error { return tx.allocs.Delete(addrKey(a3)) }, true}, // nothing left to find
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, id)
			}
			damage(t, s, tc.damage)
			view(t, s, func(tx *Tx) error {
				if got := tx.indexesAgree(); got != tc.want {
					t.Errorf("indexesAgree = %v, want %v", got, tc.want)
				}
				return nil
			})
		})
	}
}
