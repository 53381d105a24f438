package store

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

func podRec(ip, id, uid string) *allocator.Record {
	r := rec(ip, id, "eth0")
	r.PodUID = uid
	return r
}

// byPod is the pod index's answer for uid; an empty uid is no pod (a zero
// Query.PodUID selects nothing by pod, so the plugin never asks for it).
func byPod(t *testing.T, tx *Tx, uid string) []string {
	t.Helper()
	if uid == "" {
		return []string{}
	}
	recs, err := tx.Records(allocator.Query{PodUID: uid})
	if err != nil {
		t.Fatal(err)
	}
	return ips(recs)
}

// The pod index finds a pod's records through every write that moves them
// (put, overwrite with another UID, replace, delete, damaged delete), also
// when every UID hashes alike; it never lists a record of another UID.
func TestPodIndex(t *testing.T) {
	for _, collide := range []bool{false, true} {
		func() {
			if collide {
				defer func(h func(string) uint64) { podHash = h }(podHash)
				podHash = func(string) uint64 { return 7 }
			}
			s := newStore(t)
			update(t, s, func(tx *Tx) error {
				for _, r := range []*allocator.Record{podRec("10.0.0.2", "a", "u1"), podRec("10.0.0.3", "b", "u1"), podRec("10.0.0.4", "c", "u2"), rec("10.0.0.5", "d", "eth0"), podRec("fd00::2", "a", "u1")} {
					if err := tx.Put(r); err != nil {
						return err
					}
				}
				// The same attachment rewrites its record with another UID.
				if err := tx.Put(podRec("10.0.0.3", "b", "u3")); err != nil {
					return err
				}
				// The daemon's takeover of 10.0.0.4 for a u1 sandbox.
				if _, _, err := tx.Replace(podRec("10.0.0.4", "e", "u1")); err != nil {
					return err
				}
				if _, err := tx.remove(netip.MustParseAddr("10.0.0.2")); err != nil {
					return err
				}
				return nil
			})
			view(t, s, func(tx *Tx) error {
				eq(t, "u1", byPod(t, tx, "u1"), []string{"10.0.0.4", "fd00::2"})
				eq(t, "u2", byPod(t, tx, "u2"), []string{})
				eq(t, "u3", byPod(t, tx, "u3"), []string{"10.0.0.3"})
				eq(t, "no UID", byPod(t, tx, ""), []string{})
				return nil
			})
			consistent(t, s)
		}()
	}
}

// The pod index is derived: a lost or stray entry is found by VerifyIndexes
// and repaired from the records; a store written without the index (before
// it existed) gets it, built from the records, at its next read-write open.
func TestPodIndexRepairAndUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net1.db")
	s, err := Open(path, OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx *Tx) error {
		for _, r := range []*allocator.Record{podRec("10.0.0.2", "a", "u1"), podRec("10.0.0.3", "b", "u1"), podRec("10.0.0.4", "c", "u2")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	damage(t, s, func(tx *Tx) error {
		if err := tx.pods.Delete(append(podPrefix("u1"), addrKey(netip.MustParseAddr("10.0.0.3"))...)); err != nil {
			return err
		}
		return tx.pods.Put(append(podPrefix("u2"), addrKey(netip.MustParseAddr("10.0.0.2"))...), nil)
	})
	view(t, s, func(tx *Tx) error {
		rep := tx.VerifyIndexes()
		if rep.PodAdded != 1 || rep.PodRemoved != 1 || !rep.Changed() {
			t.Errorf("VerifyIndexes = %s, want 1 pod entry added, 1 removed", rep)
		}
		// A stray entry never lists another UID's record.
		eq(t, "u2 with a stray entry", byPod(t, tx, "u2"), []string{"10.0.0.4"})
		return nil
	})
	update(t, s, func(tx *Tx) error {
		_, err := tx.RepairIndexes("test", time.Now())
		return err
	})
	consistent(t, s)
	view(t, s, func(tx *Tx) error {
		eq(t, "u1 repaired", byPod(t, tx, "u1"), []string{"10.0.0.2", "10.0.0.3"})
		return nil
	})
	// The bucket gone, as in a store written before the index existed.
	if err := s.db.Update(func(btx *bolt.Tx) error { return btx.DeleteBucket(bucketPods) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ro, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	view(t, ro, func(tx *Tx) error {
		eq(t, "u1 read-only without the index", byPod(t, tx, "u1"), []string{"10.0.0.2", "10.0.0.3"})
		return nil
	})
	ro.Close()
	s, err = Open(path, OpenOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	consistent(t, s)
	view(t, s, func(tx *Tx) error {
		eq(t, "u1 after the upgrade", byPod(t, tx, "u1"), []string{"10.0.0.2", "10.0.0.3"})
		return nil
	})
	if acts := auditActions(t, s); !slices.Contains(acts, allocator.AuditIndexRepair) {
		t.Errorf("audit %v: the index built at open is not audited", acts)
	}
}

// The audit log read from a sequence: only later entries, the pod UID kept
// (format 3), the log's last sequence; a log whose sequences restarted below
// the mark (a replaced store) is read whole; the reported mark persists.
func TestAuditSince(t *testing.T) {
	s := newStore(t)
	evs := []allocator.AuditEvent{
		{Time: time.Unix(1, 0).UTC(), Action: allocator.AuditRelease, Reason: "CNI DEL", ContainerID: "a", By: "plugin"},
		{Time: time.Unix(2, 0).UTC(), Action: allocator.AuditRelease, Reason: allocator.ReasonPodSandboxReplaced, ContainerID: "b", Pod: "ns/p", PodUID: "u1", By: "plugin"},
	}
	update(t, s, func(tx *Tx) error {
		for _, ev := range evs {
			if err := tx.Audit(ev); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		all, last := tx.AuditSince(0)
		eq(t, "all", all, evs)
		eq(t, "last", last, uint64(2))
		later, last := tx.AuditSince(1)
		eq(t, "after 1", later, evs[1:])
		eq(t, "last after 1", last, uint64(2))
		none, last := tx.AuditSince(2)
		eq(t, "after 2", len(none), 0)
		eq(t, "last after 2", last, uint64(2))
		again, last := tx.AuditSince(99)
		eq(t, "after a mark above the log (another log)", again, evs)
		eq(t, "last of another log", last, uint64(2))
		eq(t, "no mark", tx.AuditReported(), uint64(0))
		return nil
	})
	update(t, s, func(tx *Tx) error { return tx.SetAuditReported(2) })
	view(t, s, func(tx *Tx) error {
		eq(t, "mark", tx.AuditReported(), uint64(2))
		return nil
	})
}

// podIP is the i-th address of the deferred-delete tests.
func podIP(i int) string { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String() }

// A release defers its pod index delete (poddrop): while the queue has room
// no page of the pod index is rewritten, the released record is never
// listed and the indexes verify; when the queue is full its entries go
// together. An address given back to the same pod while its entry is queued
// keeps its entry through that flush.
func TestPodIndexDeferredDeletes(t *testing.T) {
	s := newStore(t)
	const n = 400 // a pod index of several pages
	update(t, s, func(tx *Tx) error {
		for i := range n {
			if err := tx.Put(podRec(podIP(i), fmt.Sprint("c", i), fmt.Sprint("u", i))); err != nil {
				return err
			}
		}
		return nil
	})
	podRoot := func() (root pageID) {
		view(t, s, func(tx *Tx) error {
			root = pageID(tx.pods.Root())
			if tx.poddrop != nil && tx.poddrop.Root() != 0 {
				t.Errorf("the pod drop queue has root page %d: not inline", tx.poddrop.Root())
			}
			return nil
		})
		return root
	}
	before := podRoot()
	rewrites := 0
	const releases = 80
	for i := range releases {
		update(t, s, func(tx *Tx) error {
			_, err := tx.remove(netip.MustParseAddr(podIP(i)))
			return err
		})
		if root := podRoot(); root != before {
			rewrites++
			before = root
		}
		if i == 1 { // u0's address, released above, goes back to u0
			update(t, s, func(tx *Tx) error { return tx.Put(podRec(podIP(0), "c0-again", "u0")) })
		}
		view(t, s, func(tx *Tx) error {
			if got := byPod(t, tx, fmt.Sprint("u", i)); i > 0 && len(got) != 0 {
				t.Errorf("released u%d still listed: %v", i, got)
			}
			return nil
		})
	}
	// Each queue holds at least 20 such keys (a quarter page).
	if rewrites == 0 || rewrites > releases/20+1 {
		t.Errorf("the pod index was rewritten by %d of %d releases (and one ADD), want 1 to %d (when the queue is full)", rewrites, releases, releases/20+1)
	}
	view(t, s, func(tx *Tx) error {
		eq(t, "u0, given back its address while its entry was queued", byPod(t, tx, "u0"), []string{podIP(0)})
		eq(t, "u100, never released", byPod(t, tx, "u100"), []string{podIP(100)})
		return nil
	})
	consistent(t, s)
}

// A queued pod index delete of an entry the records call for (damage: the
// next flush would lose it) is found by VerifyIndexes and taken off the
// queue by RepairIndexes.
func TestPodDropOfALiveEntryIsRepaired(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*allocator.Record{podRec("10.0.0.2", "a", "u1"), podRec("10.0.0.3", "b", "u2")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		_, err := tx.remove(netip.MustParseAddr("10.0.0.3")) // creates the queue
		return err
	})
	live := append(podPrefix("u1"), addrKey(netip.MustParseAddr("10.0.0.2"))...)
	damage(t, s, func(tx *Tx) error { return tx.poddrop.Put(live, podDropMark) })
	view(t, s, func(tx *Tx) error {
		if rep := tx.VerifyIndexes(); rep.PodAdded != 1 || !rep.Changed() {
			t.Errorf("VerifyIndexes = %s, want the queued live entry counted (1 pod entry added)", rep)
		}
		return nil
	})
	update(t, s, func(tx *Tx) error {
		_, err := tx.RepairIndexes("test", time.Now())
		return err
	})
	consistent(t, s)
	update(t, s, func(tx *Tx) error { return tx.flushPodDrops(tx.podDrops(), podPrefix("none")) })
	view(t, s, func(tx *Tx) error {
		eq(t, "u1 after a flush", byPod(t, tx, "u1"), []string{"10.0.0.2"})
		return nil
	})
}
