package store

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestRecordFromNewerSchemaIsRefused(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		if err := tx.allocs.Put(addrKey(netip.MustParseAddr("10.0.0.2")), []byte(`{"v":2,"ip":"10.0.0.2","containerID":"c1"}`)); err != nil {
			return err
		}
		// A binary value whose format byte is newer than this binary's.
		newer := appendRecord(&allocator.Record{IP: netip.MustParseAddr("10.0.0.3"), ContainerID: "c2"})
		newer[0] = recordNewestFormat + 1
		return tx.allocs.Put(addrKey(netip.MustParseAddr("10.0.0.3")), newer)
	})
	view(t, s, func(tx *Tx) error {
		if r, err := tx.Get(netip.MustParseAddr("10.0.0.2")); err == nil {
			t.Errorf("Get decoded a JSON record claiming v2: %+v", r)
		}
		if r, err := tx.Get(netip.MustParseAddr("10.0.0.3")); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Errorf("Get of a record in a newer binary format = %+v, %v; want an error saying it is newer", r, err)
		}
		n := 0
		if err := tx.ForEach(func(*allocator.Record) error { n++; return nil }); err != nil || n != 0 {
			t.Errorf("ForEach visited %d records (err %v); want the two undecodable ones skipped", n, err)
		}
		if d := tx.DamagedSeen(); len(d) != 2 {
			t.Errorf("DamagedSeen = %v, want both records", d)
		}
		if d := tx.DamagedRecords(); len(d) != 2 || d[1].ContainerID != "" {
			t.Errorf("DamagedRecords = %+v, want both, no owner guessed from a format this binary does not know", d)
		}
		return nil
	})
}

// A record that does not decode is quarantined: its address is never handed
// out, every verb for its own and other containers goes on, it is listed, and
// ReleaseIP frees it with an audit event.
func TestDamagedRecordQuarantine(t *testing.T) {
	a3 := netip.MustParseAddr("10.0.0.3")
	s0 := newStore(t)
	mustGet(t, s0, []allocator.StoredRangeSet{rangetest.Set4}, "b")
	var good []byte
	view(t, s0, func(tx *Tx) error {
		good = bytes.Clone(tx.allocs.Get(addrKey(netip.MustParseAddr("10.0.0.2"))))
		return nil
	})
	for name, bad := range damagedValues(good) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} { // .2 .3 .4
				mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, id)
			}
			damage(t, s, func(tx *Tx) error { return tx.allocs.Put(addrKey(a3), bad) })
			var seen []allocator.DamagedRecord
			update(t, s, func(tx *Tx) error {
				recs, err := allocator.Release(tx, allocator.Attachment{ContainerID: "b", IfName: "eth0"}, allocator.Why{Reason: "DEL", By: "plugin"}, testTime)
				if err != nil || len(recs) != 0 {
					t.Errorf("DEL of the damaged record's own container: %v, %v; want nothing released, no error", ips(recs), err)
				}
				seen = tx.DamagedSeen()
				return err
			})
			if len(seen) != 1 || seen[0].IP != a3 || !bytes.Equal(seen[0].Raw, bad) {
				t.Errorf("DEL did not report the damaged record it may own: %v", seen)
			}
			if got := release(t, s, "a", "eth0"); !slices.Equal(got, []string{"10.0.0.2"}) {
				t.Errorf("DEL of another container: %v", got)
			}
			update(t, s, func(tx *Tx) error {
				n, err := allocator.MarkCommitted(tx, allocator.Attachment{ContainerID: "c", IfName: "eth0"}, testTime)
				if err != nil || n != 1 {
					t.Errorf("commit marker for another container: %d, %v", n, err)
				}
				gone, err := allocator.GarbageCollect(tx, []allocator.Attachment{{ContainerID: "c", IfName: "eth0"}}, testTime)
				if err != nil || len(gone) != 0 {
					t.Errorf("GC: released %v, %v; want the damaged record kept", ips(gone), err)
				}
				return err
			})
			// Fill the pool: .3 is never handed out.
			for i := range 5 {
				r := alloc(t, s, []allocator.StoredRangeSet{rangetest.Set4}, fmt.Sprint("n", i), "eth0")
				if slices.Contains(r.ips(), "10.0.0.3") {
					t.Fatalf("ADD handed out the damaged record's address: %v", r.ips())
				}
			}
			// Even with its bit lost too.
			damage(t, s, func(tx *Tx) error { return takenBits{tx.taken}.set(a3, false) })
			release(t, s, "n0", "eth0")
			if r := alloc(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "late", "eth0"); slices.Contains(r.ips(), "10.0.0.3") {
				t.Fatalf("ADD handed out the damaged record's address after its bit was lost: %v", r.ips())
			}
			view(t, s, func(tx *Tx) error {
				d := tx.DamagedRecords()
				if len(d) != 1 || d[0].IP != a3 || d[0].Err == nil {
					t.Errorf("DamagedRecords = %v", d)
				}
				return nil
			})
			update(t, s, func(tx *Tx) error {
				if err := tx.Put(rec("10.0.0.3", "x", "eth0")); !errors.Is(err, allocator.ErrAddressReserved) {
					t.Errorf("Put over a damaged record: %v, want ErrAddressReserved", err)
				}
				rel, err := allocator.ReleaseIP(tx, a3, "operator", "operator", testTime)
				if err != nil || rel.Damaged == nil || rel.Record != nil {
					t.Errorf("ReleaseIP = %+v, %v; want the damaged record", rel, err)
				}
				return err
			})
			view(t, s, func(tx *Tx) error {
				if tx.HasRecord(a3) || len(tx.DamagedRecords()) != 0 {
					t.Error("ReleaseIP left the damaged record")
				}
				return nil
			})
			if acts := auditActions(t, s); !slices.Contains(acts, allocator.AuditDamagedRelease) {
				t.Errorf("no %s audit event: %v", allocator.AuditDamagedRelease, acts)
			}
			consistent(t, s)
		})
	}
}

// The owner of a record damaged after its owner fields is still shown.
func TestDamagedRecordSalvagesOwner(t *testing.T) {
	v := appendRecord(rec("10.0.0.3", "sandbox-1", "eth0"))
	d := newDamaged(addrKey(netip.MustParseAddr("10.0.0.3")), v[:len(v)-3], errors.New("x"))
	if d.ContainerID != "sandbox-1" || d.IfName != "eth0" {
		t.Errorf("salvaged owner %q %q", d.ContainerID, d.IfName)
	}
	if d := newDamaged(addrKey(netip.MustParseAddr("10.0.0.3")), v[:12], errors.New("x")); d.IfName != "" {
		t.Errorf("an ifname was read from a value cut before it: %q", d.IfName)
	}
}

// Damaged values other than records never block DEL, and are reported.
func TestDamagedMetaValuesDoNotBlockRelease(t *testing.T) {
	s := newStore(t)
	for _, id := range []string{"a", "b"} {
		mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, id)
	}
	update(t, s, func(tx *Tx) error {
		if err := tx.Audit(allocator.AuditEvent{Time: testTime, Action: "test"}); err != nil {
			return err
		}
		return tx.RecordExhaustion(0, "x", testTime)
	})
	damage(t, s, func(tx *Tx) error {
		if err := tx.meta.Put(keyRanges, []byte{binaryFormat, 0xff}); err != nil {
			return err
		}
		if err := tx.meta.Put(lastReservedKey(0), []byte{9, 9}); err != nil {
			return err
		}
		if err := tx.exhaustion.Put([]byte("0"), []byte("{cut")); err != nil {
			return err
		}
		b := tx.auditq // the newest entry is in the queue (Audit)
		k, _ := b.Cursor().Last()
		return b.Put(bytes.Clone(k), []byte{binaryFormat, 0xff, 0xff})
	})
	if got := release(t, s, "a", "eth0"); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("DEL with damaged meta values: %v", got)
	}
	view(t, s, func(tx *Tx) error {
		if _, err := tx.RangeSets(); !errors.Is(err, allocator.ErrDamagedValue) {
			t.Errorf("RangeSets of a damaged value: %v, want ErrDamagedValue", err)
		}
		if ex, err := tx.Exhaustions(); err != nil || len(ex) != 0 {
			t.Errorf("Exhaustions with a damaged entry: %v, %v", ex, err)
		}
		evs, err := tx.AuditLog(10)
		if err != nil || !slices.ContainsFunc(evs, func(e allocator.AuditEvent) bool { return e.Action == allocator.AuditDamagedEntry }) {
			t.Errorf("AuditLog with a damaged entry: %v, %v", evs, err)
		}
		return nil
	})
	// ADD still works and rewrites the range sets.
	mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "c")
	view(t, s, func(tx *Tx) error {
		if sets, err := tx.RangeSets(); err != nil || len(sets) != 1 {
			t.Errorf("range sets after an ADD: %v, %v", sets, err)
		}
		return nil
	})
}
