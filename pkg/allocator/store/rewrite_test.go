package store

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// checkSweepIndexes verifies that every record is in the owners and taken
// indexes under its owner, and that neither holds anything else.
func checkSweepIndexes(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(func(tx *Tx) error {
		n := 0
		err := tx.ForEach(func(r *allocator.Record) error {
			n++
			if !tx.Taken(r.IP) {
				t.Errorf("%s missing from the taken index", r.IP)
			}
			byOwner, err := tx.byOwner(r.ContainerID, r.IfName)
			if err != nil || len(byOwner) != 1 || byOwner[0].IP != r.IP {
				t.Errorf("owners index of %s/%s: %v (%v), want %s", r.ContainerID, r.IfName, byOwner, err, r.IP)
			}
			return nil
		})
		owners := 0
		_ = tx.owners.ForEach(func(k, v []byte) error { owners++; return nil })
		if tx.Count() != n || owners != n {
			t.Errorf("%d records, %d taken, %d owner entries", n, tx.Count(), owners)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// rewriteOf is the daemon's rewrite of a record a scan saw: a new observation.
func rewriteOf(t *testing.T, s Seen, misses int) Rewrite {
	t.Helper()
	next := *s.Rec
	next.Obs = allocator.Observation{Misses: misses, FirstMissed: time.Date(2025, 3, 1, 12, 5, 0, 123, time.UTC), Verdict: "absent", SandboxState: "absent"}
	w, err := PrepareRewrite(s, &next)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestPutIfUnchanged(t *testing.T) {
	path := sweepStore(t, 4)
	c := &RecordCache{}
	seen, err := sweepScan(t, path, c)
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]Rewrite, len(seen))
	for i, s := range seen {
		ws[i] = rewriteOf(t, s, i+1)
	}
	// Since the scan, a plugin committed record 1, released record 2, and
	// released record 3 and gave its address to another container.
	sweepUpdate(t, path, func(tx *Tx) error {
		r, _ := tx.Get(seen[1].Rec.IP)
		r.State = allocator.StateCommitted
		if err := tx.Put(r); err != nil {
			return err
		}
		if _, err := tx.remove(seen[2].Rec.IP); err != nil {
			return err
		}
		if _, err := tx.remove(seen[3].Rec.IP); err != nil {
			return err
		}
		return tx.Put(&allocator.Record{IP: seen[3].Rec.IP, ContainerID: "other", IfName: "eth0", State: allocator.StatePending, Created: seen[3].Rec.Created})
	})
	var done []bool
	sweepUpdate(t, path, func(tx *Tx) error {
		for _, w := range ws {
			ok, err := tx.PutIfUnchanged(w)
			if err != nil {
				return err
			}
			done = append(done, ok)
		}
		return nil
	})
	if want := []bool{true, false, false, false}; !reflect.DeepEqual(done, want) {
		t.Fatalf("PutIfUnchanged stored %v, want %v (only the record unchanged since the scan)", done, want)
	}
	recs := allRecords(t, path)
	if len(recs) != 3 || recs[0].Obs.Misses != 1 || recs[1].Obs.Misses != 0 || recs[1].State != allocator.StateCommitted ||
		recs[2].ContainerID != "other" || recs[2].Obs != (allocator.Observation{}) {
		t.Fatalf("records after the rewrites: %+v %+v %+v", recs[0], recs[1], recs[2])
	}
	checkSweepIndexes(t, path)
}

// PrepareRewrite refuses a new value for another allocation: the fast path
// writes no index, so it must never change what the indexes are keyed by.
func TestPrepareRewriteRefusesAnotherAllocation(t *testing.T) {
	path := sweepStore(t, 1)
	seen, err := sweepScan(t, path, &RecordCache{})
	if err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*allocator.Record){
		"address":       func(r *allocator.Record) { r.IP = r.IP.Next() },
		"container":     func(r *allocator.Record) { r.ContainerID = "other" },
		"interface":     func(r *allocator.Record) { r.IfName = "net1" },
		"creation time": func(r *allocator.Record) { r.Created = r.Created.Add(time.Nanosecond) },
		"pod UID":       func(r *allocator.Record) { r.PodUID = r.PodUID + "-other" },
	} {
		next := *seen[0].Rec
		mod(&next)
		if _, err := PrepareRewrite(seen[0], &next); err == nil {
			t.Errorf("rewrite changing the %s accepted", name)
		}
	}
	if _, err := PrepareRewrite(Seen{}, seen[0].Rec); err == nil {
		t.Error("rewrite of a record no scan saw accepted")
	}
}

// After Stored, the next scan takes the written record from the cache instead
// of decoding it, and it is exactly what decoding the stored bytes gives: the
// encoding must round-trip the fields the daemon writes.
func TestStoredPrimesCache(t *testing.T) {
	path := sweepStore(t, 3)
	c := &RecordCache{}
	seen, err := sweepScan(t, path, c)
	if err != nil {
		t.Fatal(err)
	}
	next := *seen[1].Rec
	next.State, next.Committed = allocator.StateCommitted, time.Date(2025, 3, 1, 12, 1, 2, 345678901, time.UTC)
	next.Obs = allocator.Observation{SandboxState: "READY", Verdict: "live"}
	w1, err := PrepareRewrite(seen[1], &next)
	if err != nil {
		t.Fatal(err)
	}
	w2 := rewriteOf(t, seen[2], 2)
	sweepUpdate(t, path, func(tx *Tx) error {
		for _, w := range []Rewrite{w1, w2} {
			if ok, err := tx.PutIfUnchanged(w); !ok || err != nil {
				return fmt.Errorf("PutIfUnchanged: %v %v", ok, err)
			}
		}
		return nil
	})
	c.Stored(w1)
	c.Stored(w2)
	c.Stored(w2) // no longer the bytes it replaced: a no-op
	again, err := sweepScan(t, path, c)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Rec != seen[0].Rec || again[1].Rec != &next || again[2].Rec != w2.next {
		t.Fatal("the next scan decoded records the cache was told about")
	}
	plain := allRecords(t, path)
	if !reflect.DeepEqual(seenRecords(again), plain) {
		t.Fatalf("cached records differ from the decoded store:\n%+v\n%+v", *again[1].Rec, *plain[1])
	}
}
