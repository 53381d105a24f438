package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// The audit log's queue (Audit): the newest entries inline in the root page.

// auditEv is the i-th event of a test, as a DEL writes it.
func auditEv(i int) allocator.AuditEvent {
	return allocator.AuditEvent{Time: time.Unix(1700000000+int64(i), 0).UTC(), Action: allocator.AuditRelease, Reason: "DEL",
		ContainerID: fmt.Sprint("c", i), IfName: "eth0", Pod: fmt.Sprintf("ns/pod-%d", i), By: "plugin"}
}

// appendOne appends event i in a transaction of its own, as one DEL does.
func appendOne(t *testing.T, s *Store, i int) {
	t.Helper()
	update(t, s, func(tx *Tx) error { return tx.Audit(auditEv(i)) })
}

func containerIDs(evs []allocator.AuditEvent) []string {
	out := []string{}
	for _, ev := range evs {
		out = append(out, ev.ContainerID)
	}
	return out
}

func wantIDs(from, to int) []string {
	out := []string{}
	for i := from; i < to; i++ {
		out = append(out, auditEv(i).ContainerID)
	}
	return out
}

// A reader that follows the log by sequence, as the daemon does between
// sweeps (AuditSince from its last mark), sees every event exactly once and
// in order while entries move from the queue to the audit bucket; AuditLog
// shows the same log.
func TestAuditSinceFollowsTheQueue(t *testing.T) {
	s := newStore(t)
	const n = 300
	var seen []allocator.AuditEvent
	var mark uint64
	for i := range n {
		appendOne(t, s, i)
		view(t, s, func(tx *Tx) error {
			evs, last := tx.AuditSince(mark)
			seen = append(seen, evs...)
			if last < mark {
				t.Fatalf("after event %d: the last sequence went back from %d to %d", i, mark, last)
			}
			mark = last
			return nil
		})
	}
	eq(t, "events seen by a reader following the log", containerIDs(seen), wantIDs(0, n))
	eq(t, "last sequence", mark, uint64(n))
	view(t, s, func(tx *Tx) error {
		all, err := tx.AuditLog(1 << 20)
		if err != nil {
			return err
		}
		eq(t, "AuditLog", containerIDs(all), wantIDs(0, n))
		last5, _ := tx.AuditLog(5)
		eq(t, "AuditLog(5)", containerIDs(last5), wantIDs(n-5, n))
		if queueLen(tx) == 0 || tx.audit.Stats().KeyN == 0 {
			t.Errorf("the log is not split between the queue (%d) and the audit bucket (%d): the test does not cover the merge", queueLen(tx), tx.audit.Stats().KeyN)
		}
		return nil
	})
}

// An append to a log whose queue has room writes no page of the audit
// bucket: its root page stays where it was, and the queue stays inline.
// Only the append that fills the queue moves it (and rewrites the audit
// bucket's last pages).
func TestAuditAppendLeavesTheAuditBucketAlone(t *testing.T) {
	s := newStore(t)
	for i := range 200 { // an audit bucket of more than one page
		appendOne(t, s, i)
	}
	rootOf := func() (audit, queue pageID) {
		view(t, s, func(tx *Tx) error {
			audit, queue = pageID(tx.audit.Root()), pageID(tx.auditq.Root())
			return nil
		})
		return
	}
	before, _ := rootOf()
	moved := 0
	const appends = 60
	for i := 200; i < 200+appends; i++ {
		appendOne(t, s, i)
		after, queue := rootOf()
		if queue != 0 {
			t.Fatalf("append %d: the queue has root page %d: not inline", i, queue)
		}
		if after != before {
			moved++
		}
		before = after
	}
	// Each queue holds at least 4 such entries (a quarter page).
	if moved > appends/4 {
		t.Errorf("the audit bucket was rewritten by %d of %d appends, want at most %d (only when the queue is full)", moved, appends, appends/4)
	}
}

// pageID is a bucket's root page (0: inline).
type pageID uint64

// A store written before the queue existed (entries only in the audit
// bucket, its sequence the last) takes new entries after its own, and an
// older binary that appends to the audit bucket directly while entries are
// queued (a rollback, or binaries of two versions on one node) loses none of
// them: the queued entry whose sequence it took moves after it.
func TestAuditQueueOnAnOlderLayoutAndWriter(t *testing.T) {
	s := newStore(t)
	// The older layout: no queue, entries appended as older binaries do.
	oldAppend := func(btx *bolt.Tx, i int) error {
		b := btx.Bucket(bucketAudit)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		ev := auditEv(i)
		return b.Put(binary.BigEndian.AppendUint64(nil, seq), appendAudit(&ev))
	}
	if err := s.db.Update(func(btx *bolt.Tx) error {
		if btx.Bucket(bucketAuditQueue) != nil {
			if err := btx.DeleteBucket(bucketAuditQueue); err != nil {
				return err
			}
		}
		for i := range 3 {
			if err := oldAppend(btx, i); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	appendOne(t, s, 3) // creates the queue
	appendOne(t, s, 4)
	// The older binary appends: it takes sequence 4, which event 3 holds in
	// the queue.
	if err := s.db.Update(func(btx *bolt.Tx) error { return oldAppend(btx, 5) }); err != nil {
		t.Fatal(err)
	}
	view(t, s, func(tx *Tx) error {
		all, _ := tx.AuditSince(0)
		if got := containerIDs(all); len(got) != 6 || !slices.Contains(got, auditEv(5).ContainerID) {
			t.Errorf("before the queue moves: %d events, want all 6", len(got))
		}
		return nil
	})
	i := 6
	for ; ; i++ { // until the queue moves
		appendOne(t, s, i)
		var queued int
		view(t, s, func(tx *Tx) error { queued = queueLen(tx); return nil })
		if queued == 0 || i > 100 {
			break
		}
	}
	view(t, s, func(tx *Tx) error {
		all, err := tx.AuditLog(1 << 20)
		if err != nil {
			return err
		}
		got := containerIDs(all)
		want := wantIDs(0, i+1)
		slices.Sort(got)
		slices.Sort(want)
		eq(t, "every event once", got, want)
		var prev uint64
		c := tx.audit.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			seq := binary.BigEndian.Uint64(k)
			if seq <= prev {
				t.Errorf("audit sequences not increasing: %d after %d", seq, prev)
			}
			prev = seq
		}
		if tx.audit.Sequence() != prev {
			t.Errorf("audit bucket sequence %d, its last entry %d: an older binary would reuse a sequence", tx.audit.Sequence(), prev)
		}
		return nil
	})
}

// A damaged key in the queue or the log (another length, 0, a sequence no
// log reaches) or a damaged bucket sequence never sets the next sequence:
// every append after it is kept (none overwrites another), AuditSince
// returns each exactly once, and AuditLog shows a damaged key's entry that
// is still there as damaged.
func TestAuditDamagedKeysNeverOverwrite(t *testing.T) {
	top := binary.BigEndian.AppendUint64(nil, math.MaxUint64)
	// shown: the damaged key stays in the log (a queue's flush moves its
	// entry under a sequence of its own).
	cases := []struct {
		name   string
		shown  bool
		damage func(tx *Tx) error
	}{
		{"queue key of 9 bytes", false, func(tx *Tx) error {
			k, v := tx.auditq.Cursor().Last()
			return tx.auditq.Put(append(bytes.Clone(k), 0), bytes.Clone(v))
		}},
		{"queue key 2^64-1", false, func(tx *Tx) error { return tx.auditq.Put(top, appendAudit(&allocator.AuditEvent{Action: "x"})) }},
		{"queue key 0", false, func(tx *Tx) error {
			return tx.auditq.Put(make([]byte, 8), appendAudit(&allocator.AuditEvent{Action: "x"}))
		}},
		{"log key 2^64-1", true, func(tx *Tx) error { return tx.audit.Put(top, appendAudit(&allocator.AuditEvent{Action: "x"})) }},
		{"log key of 3 bytes", true, func(tx *Tx) error {
			return tx.audit.Put([]byte{0xff, 0, 1}, appendAudit(&allocator.AuditEvent{Action: "x"}))
		}},
		{"log sequence 2^64-1", false, func(tx *Tx) error { return tx.audit.SetSequence(math.MaxUint64) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			appendOne(t, s, 0)
			damage(t, s, tc.damage)
			const n = 3 * auditLimit / 100 // several flushes of the queue
			for i := 1; i <= n; i++ {
				appendOne(t, s, i)
			}
			var since, log []allocator.AuditEvent
			view(t, s, func(tx *Tx) error {
				since, _ = tx.AuditSince(0)
				var err error
				log, err = tx.AuditLog(1 << 20)
				return err
			})
			seen := map[string]int{}
			for _, ev := range since {
				seen[ev.ContainerID]++
			}
			for i := 1; i <= n; i++ {
				if id := auditEv(i).ContainerID; seen[id] != 1 {
					t.Errorf("entry %s: AuditSince returns it %d times, want 1", id, seen[id])
				}
			}
			shown := 0
			for _, ev := range log {
				if ev.Action == allocator.AuditDamagedEntry {
					shown++
				}
			}
			if tc.shown && shown == 0 {
				t.Errorf("AuditLog does not show the entry under the damaged key")
			}
		})
	}
}
