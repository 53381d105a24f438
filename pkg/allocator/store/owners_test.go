package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestOwnersIndexCollisions: the owners index is keyed by a hash of the
// owner; with every owner hashing alike, lookups, overwrites and deletes
// still see each owner's records only.
func TestOwnersIndexCollisions(t *testing.T) {
	defer func(h func(allocator.Attachment) uint64) { ownerHash = h }(ownerHash)
	ownerHash = func(allocator.Attachment) uint64 { return 42 }
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*allocator.Record{rec("10.0.0.2", "c1", "eth0"), rec("10.0.0.3", "c2", "eth0"), rec("10.0.0.4", "c1", "net1"), rec("10.0.0.5", "c1", "eth0")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		// Put never takes another owner's address; Replace does.
		if err := tx.Put(rec("10.0.0.3", "c1", "eth0")); !errors.Is(err, allocator.ErrAddressReserved) {
			t.Errorf("Put over another owner's record: %v, want ErrAddressReserved", err)
		}
		// 10.0.0.3 changes hands, 10.0.0.5 is released.
		if prev, _, err := tx.Replace(rec("10.0.0.3", "c1", "eth0")); err != nil || prev == nil || prev.ContainerID != "c2" {
			t.Errorf("Replace = %+v, %v; want c2's record", prev, err)
		}
		if _, err := tx.remove(netip.MustParseAddr("10.0.0.5")); err != nil {
			return err
		}
		for _, tc := range []struct {
			id, ifname string
			want       []string
		}{{"c1", "eth0", []string{"10.0.0.2", "10.0.0.3"}}, {"c2", "eth0", nil}, {"c1", "net1", []string{"10.0.0.4"}}, {"c3", "eth0", nil}} {
			recs, err := tx.byOwner(tc.id, tc.ifname)
			if err != nil {
				return err
			}
			if got := ips(recs); !slices.Equal(got, tc.want) {
				t.Errorf("ByOwner(%s, %s) = %v, want %v", tc.id, tc.ifname, got, tc.want)
			}
		}
		checkIndex(t, tx)
		return nil
	})
}

func TestOwnersIndex(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*allocator.Record{rec("10.0.0.3", "c1", "eth0"), rec("fd00::3", "c1", "eth0"), rec("10.0.0.2", "c1", "eth0"),
			rec("10.0.0.4", "c1", "net1"), rec("10.0.0.5", "c10", "eth0"), rec("10.0.0.6", "c1", "")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	byOwner := func(tx *Tx, id, ifname string) []string {
		recs, err := tx.byOwner(id, ifname)
		if err != nil {
			t.Fatal(err)
		}
		return ips(recs)
	}
	view(t, s, func(tx *Tx) error {
		eq(t, "ByOwner(c1, eth0)", byOwner(tx, "c1", "eth0"), []string{"10.0.0.2", "10.0.0.3", "fd00::3"})
		eq(t, "ByOwner(c1, net1)", byOwner(tx, "c1", "net1"), []string{"10.0.0.4"})
		eq(t, "ByOwner(c1, \"\")", byOwner(tx, "c1", ""), []string{"10.0.0.6"})
		eq(t, "ByOwner(c10, eth0)", byOwner(tx, "c10", "eth0"), []string{"10.0.0.5"})
		eq(t, "ByOwner(c, eth0)", byOwner(tx, "c", "eth0"), []string{})
		checkIndex(t, tx)
		return nil
	})
	update(t, s, func(tx *Tx) error {
		// Put refuses to overwrite another owner; Replace moves the address.
		if err := tx.Put(rec("10.0.0.3", "c2", "eth0")); !errors.Is(err, allocator.ErrAddressReserved) {
			t.Errorf("Put over c1's record: %v, want ErrAddressReserved", err)
		}
		if _, _, err := tx.Replace(rec("10.0.0.3", "c2", "eth0")); err != nil {
			return err
		}
		// Same owner, new state: one index entry.
		r := rec("10.0.0.2", "c1", "eth0")
		r.State = allocator.StateCommitted
		if err := tx.Put(r); err != nil {
			return err
		}
		if got, err := tx.remove(netip.MustParseAddr("fd00::3")); err != nil || got == nil || got.ContainerID != "c1" {
			t.Errorf("Delete(fd00::3) = %+v, %v", got, err)
		}
		if got, err := tx.remove(netip.MustParseAddr("10.0.0.99")); err != nil || got != nil {
			t.Errorf("Delete of a free address = %+v, %v; want nil, nil", got, err)
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		eq(t, "ByOwner(c1, eth0)", byOwner(tx, "c1", "eth0"), []string{"10.0.0.2"})
		eq(t, "ByOwner(c2, eth0)", byOwner(tx, "c2", "eth0"), []string{"10.0.0.3"})
		r, _ := tx.Get(netip.MustParseAddr("10.0.0.2"))
		if r == nil || r.State != allocator.StateCommitted {
			t.Errorf("Get(10.0.0.2) = %+v, want committed", r)
		}
		checkIndex(t, tx)
		eq(t, "Count", tx.Count(), 5)
		return nil
	})
}

// TestOwnersIndexRandom drives Put/Delete/overwrite at random and compares
// ByOwner with a map model after every transaction.
func TestOwnersIndexRandom(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 7))
	s := newStore(t)
	model := map[netip.Addr][2]string{}
	owners := [][2]string{{"a", "eth0"}, {"a", "eth1"}, {"a", ""}, {"ab", "eth0"}, {"b", "eth0"}}
	for step := range 300 {
		update(t, s, func(tx *Tx) error {
			for range 1 + r.IntN(4) {
				ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(24))})
				if r.IntN(3) == 0 {
					if _, err := tx.remove(ip); err != nil {
						return err
					}
					delete(model, ip)
					continue
				}
				o := owners[r.IntN(len(owners))]
				err := tx.Put(rec(ip.String(), o[0], o[1]))
				if held, ok := model[ip]; ok && held != o {
					if !errors.Is(err, allocator.ErrAddressReserved) {
						t.Fatalf("seed %d: Put of %s for %v over %v's record: %v, want ErrAddressReserved", seed, ip, o, held, err)
					}
					if r.IntN(2) == 0 {
						continue
					}
					_, _, err = tx.Replace(rec(ip.String(), o[0], o[1]))
				}
				if err != nil {
					return err
				}
				model[ip] = o
			}
			return nil
		})
		view(t, s, func(tx *Tx) error {
			for _, o := range owners {
				var want []string
				for ip, mo := range model {
					if mo == o {
						want = append(want, ip.String())
					}
				}
				slices.SortFunc(want, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
				recs, err := tx.byOwner(o[0], o[1])
				if err != nil {
					return err
				}
				if got := ips(recs); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("seed %d step %d: ByOwner(%q, %q) = %v, want %v", seed, step, o[0], o[1], got, want)
				}
			}
			if tx.Count() != len(model) {
				t.Fatalf("seed %d step %d: Count = %d, want %d", seed, step, tx.Count(), len(model))
			}
			return nil
		})
	}
	view(t, s, func(tx *Tx) error { checkIndex(t, tx); return nil })
}

// needScan: when DEL finds nothing through the owner index, are the records
// read? Always in a small store or when the count is unknown; in a large one
// only when the counts disagree.
func TestNeedScan(t *testing.T) {
	cases := []struct {
		records int
		known   bool
		agree   bool
		want    bool
	}{
		{0, true, true, false},
		{0, true, false, true},
		{0, false, true, true},
		{3, true, true, true},
		{scanAlwaysBelow - 1, true, true, true},
		{scanAlwaysBelow, true, true, false},
		{scanAlwaysBelow, true, false, true},
		{65000, true, true, false},
		{65000, true, false, true},
		{65000, false, true, true},
	}
	for _, tc := range cases {
		called := false
		got := needScan(tc.records, tc.known, func() bool { called = true; return tc.agree })
		if got != tc.want {
			t.Errorf("needScan(%d, known=%v, agree=%v) = %v, want %v", tc.records, tc.known, tc.agree, got, tc.want)
		}
		if called && tc.known && tc.records > 0 && tc.records < scanAlwaysBelow {
			t.Errorf("needScan(%d) compared counts in a small store", tc.records)
		}
	}
}

// In a large store a misfiled index entry keeps the counts equal: DEL then
// trusts the index (the daemon's VerifyIndexes finds it); an entry lost is
// found by the counts.
func TestReleaseLargeStore(t *testing.T) {
	s := newStore(t)
	big := rangetest.Set(rangetest.Range("10.1.0.0/20", "10.1.0.1", "10.1.15.254", "10.1.0.1"))
	update(t, s, func(tx *Tx) error {
		ip := netip.MustParseAddr("10.1.0.1")
		for i := range scanAlwaysBelow + 10 {
			ip = ip.Next()
			if err := tx.Put(rec(ip.String(), fmt.Sprint("c", i), "eth0")); err != nil {
				return err
			}
		}
		return tx.SetRangeSets([]allocator.StoredRangeSet{big})
	})
	victim := netip.MustParseAddr("10.1.0.12") // c10
	damage(t, s, func(tx *Tx) error {
		return tx.owners.Delete(append(ownerPrefix(allocator.Attachment{ContainerID: "c10", IfName: "eth0"}), addrKey(victim)...))
	})
	if got := release(t, s, "c10", "eth0"); !slices.Equal(got, []string{victim.String()}) {
		t.Fatalf("Release of a record whose index entry is lost in a large store: %v", got)
	}
	consistent(t, s)
	if got := release(t, s, "nobody", "eth0"); len(got) != 0 {
		t.Errorf("released %v for an unknown container", got)
	}
}

// DEL (Release) finds its records whatever happened to the owner index, and
// repairs it; a consistent store is not scanned.
func TestReleaseFindsRecordsWhenTheOwnerIndexIsWrong(t *testing.T) {
	cases := []struct {
		name   string
		damage func(tx *Tx) error
	}{
		{"its entry deleted", func(tx *Tx) error {
			return tx.owners.Delete(append(ownerPrefix(allocator.Attachment{ContainerID: "b", IfName: "eth0"}), addrKey(netip.MustParseAddr("10.0.0.3"))...))
		}},
		{"every entry deleted", func(tx *Tx) error {
			if err := tx.btx.DeleteBucket(bucketOwners); err != nil {
				return err
			}
			_, err := tx.btx.CreateBucket(bucketOwners)
			return err
		}},
		{"its entry under another owner", func(tx *Tx) error {
			k := addrKey(netip.MustParseAddr("10.0.0.3"))
			if err := tx.owners.Delete(append(ownerPrefix(allocator.Attachment{ContainerID: "b", IfName: "eth0"}), k...)); err != nil {
				return err
			}
			return tx.owners.Put(append(ownerPrefix(allocator.Attachment{ContainerID: "zz", IfName: "eth0"}), k...), nil)
		}},
		{"records count lost", func(tx *Tx) error {
			if err := tx.meta.Delete(keyRecords); err != nil {
				return err
			}
			return tx.owners.Delete(append(ownerPrefix(allocator.Attachment{ContainerID: "b", IfName: "eth0"}), addrKey(netip.MustParseAddr("10.0.0.3"))...))
		}},
		{"records count damaged", func(tx *Tx) error {
			if err := tx.meta.Put(keyRecords, []byte("xx")); err != nil {
				return err
			}
			return tx.owners.Delete(append(ownerPrefix(allocator.Attachment{ContainerID: "b", IfName: "eth0"}), addrKey(netip.MustParseAddr("10.0.0.3"))...))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, id)
			}
			damage(t, s, tc.damage)
			// The owner an entry is misfiled under gets nothing of b's.
			if got := release(t, s, "zz", "eth0"); len(got) != 0 {
				t.Fatalf("Release(zz) = %v: released another owner's record through a misfiled index entry", got)
			}
			// A read-only look (CHECK) finds it without writing.
			if got := held(t, s, "b", "eth0"); !slices.Equal(got, []string{"10.0.0.3"}) {
				t.Errorf("Held(b) = %v, want 10.0.0.3", got)
			}
			if got := release(t, s, "b", "eth0"); !slices.Equal(got, []string{"10.0.0.3"}) {
				t.Fatalf("Release(b) = %v, want 10.0.0.3", got)
			}
			view(t, s, func(tx *Tx) error {
				if tx.HasRecord(netip.MustParseAddr("10.0.0.3")) {
					t.Error("b's record is still there")
				}
				return nil
			})
			consistent(t, s)
			if acts := auditActions(t, s); !slices.Contains(acts, allocator.AuditIndexRepair) {
				t.Errorf("no %s audit event: %v", allocator.AuditIndexRepair, acts)
			}
			for _, id := range []string{"a", "c"} {
				if len(held(t, s, id, "eth0")) != 1 {
					t.Errorf("%s lost its record", id)
				}
			}
		})
	}
}
