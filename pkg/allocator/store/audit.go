package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// Audit appends ev to the audit log. The log is two buckets read as one:
// audit, bounded, and auditq, the inline queue of its newest entries
// (inlineQueue). An entry joins the queue under its final sequence; when it
// would no longer fit inline, the queue and ev move to audit together
// (flushAuditQueue). An append therefore usually dirties no page of its own
// (appending to audit directly dirties its last leaf and its root branch;
// docs/benchmarks.md, "DEL's pages"). Both buckets are written in the
// caller's transaction, so a crash keeps or loses an entry with the change
// it records.
func (tx *Tx) Audit(ev allocator.AuditEvent) error {
	v := appendAudit(&ev)
	seq := max(bucketSeq(tx.audit), lastSeq(tx.audit), lastSeq(tx.auditq)) + 1
	key := binary.BigEndian.AppendUint64(nil, seq)
	q := tx.auditQueue()
	if ok, err := q.add(key, v); ok || err != nil {
		return err
	}
	return tx.flushAuditQueue(q, key, v)
}

// Audit keys are sequences: 8 bytes, big endian, from 1 up, one per entry.
// A key that is not one (another length, 0, or a number no log reaches:
// maxAuditSeq and above, as bit rot or a bad restore leave) is damage and is
// quarantined like a damaged record: it never sets the next sequence (each
// append after it would overwrite the one before), its entry is kept and
// shown as damaged (AuditLog), and a flush moves it to audit under a
// sequence of its own. The same holds for audit's bucket sequence, kept in
// the root page's entry.
const maxAuditSeq = 1 << 62

// auditSeq reads k as an audit sequence.
func auditSeq(k []byte) (uint64, bool) {
	if len(k) != 8 {
		return 0, false
	}
	s := binary.BigEndian.Uint64(k)
	return s, s >= 1 && s < maxAuditSeq
}

// bucketSeq is b's bucket sequence, 0 when it is damaged (see maxAuditSeq).
func bucketSeq(b *bolt.Bucket) uint64 {
	if s := b.Sequence(); s < maxAuditSeq {
		return s
	}
	return 0
}

// lastSeq is the highest sequence among b's keys, 0 when it has none.
// Damaged keys are skipped: those of 8 bytes and maxAuditSeq or above sort
// last, others next to a sequence; only they are stepped over.
func lastSeq(b *bolt.Bucket) uint64 {
	if b == nil {
		return 0
	}
	c := b.Cursor()
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		if s, ok := auditSeq(k); ok {
			return s
		}
	}
	return 0
}

// flushAuditQueue moves the queued entries, then (key, v), to audit, in
// sequence order, and drops audit's oldest entries past the bound: the log
// holds between auditLimit and auditLimit+auditPrune-1 entries in audit,
// plus the queue. An entry whose sequence audit already has, or is not past
// its last sequence (an older binary, which knows no queue, appended to
// audit meanwhile), is moved under the next free sequence instead: none is
// lost.
func (tx *Tx) flushAuditQueue(q inlineQueue, key, v []byte) error {
	move, err := q.drain()
	if err != nil {
		return err
	}
	move = append(move, queued{key, v})
	last := max(bucketSeq(tx.audit), lastSeq(tx.audit))
	for _, e := range move {
		seq := last + 1
		if s, ok := auditSeq(e.k); ok && s > last {
			seq = s
		}
		last = seq
		if err := tx.audit.Put(binary.BigEndian.AppendUint64(nil, seq), e.v); err != nil {
			return err
		}
	}
	if err := tx.audit.SetSequence(last); err != nil {
		return err
	}
	return tx.pruneAudit(last)
}

// pruneAudit drops audit's entries up to last-auditLimit once the oldest
// is auditLimit+auditPrune-1 or more below last, so that most flushes touch
// only the log's end. Entries are dense.
func (tx *Tx) pruneAudit(last uint64) error {
	var first uint64 // the oldest sequence (damaged keys before it skipped)
	fc := tx.audit.Cursor()
	for k, _ := fc.First(); k != nil; k, _ = fc.Next() {
		if s, ok := auditSeq(k); ok {
			first = s
			break
		}
	}
	if first == 0 || last < auditLimit+auditPrune-1 || first > last-auditLimit-auditPrune+1 {
		return nil
	}
	cutoff := binary.BigEndian.AppendUint64(nil, last-auditLimit)
	var old [][]byte
	c := tx.audit.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, cutoff) <= 0; k, _ = c.Next() {
		old = append(old, bytes.Clone(k))
	}
	for _, k := range old {
		if err := tx.audit.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// auditEntry is one entry of the log as read: its sequence and value.
type auditEntry struct {
	seq uint64
	v   []byte
}

// auditEntries returns the log's entries above after, oldest first: audit's
// then the queue's, merged by sequence (an older binary's entry may share a
// sequence with a queued one until the queue is flushed: both are
// returned). Keys that are not sequences are skipped.
func (tx *Tx) auditEntries(after uint64) []auditEntry {
	var a, q []auditEntry
	read := func(b *bolt.Bucket, out *[]auditEntry) {
		if b == nil {
			return
		}
		c := b.Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, after+1)); k != nil; k, v = c.Next() {
			if s, ok := auditSeq(k); ok {
				*out = append(*out, auditEntry{s, v})
			}
		}
	}
	read(tx.audit, &a)
	read(tx.auditq, &q)
	if len(q) == 0 {
		return a
	}
	out := make([]auditEntry, 0, len(a)+len(q))
	for len(a) > 0 && len(q) > 0 {
		if a[0].seq <= q[0].seq {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, q = append(out, q[0]), q[1:]
		}
	}
	return append(append(out, a...), q...)
}

// decodeAudit reads one entry; a damaged entry is shown as such, it never
// hides the others.
func decodeAudit(v []byte) allocator.AuditEvent {
	ev, err := readAudit(v)
	if err != nil {
		ev = allocator.AuditEvent{Action: allocator.AuditDamagedEntry, Reason: err.Error()}
	}
	return ev
}

// AuditLog returns up to limit most recent audit events, oldest first,
// after the entries under damaged keys (see maxAuditSeq), each shown as
// AuditDamagedEntry naming its key and what of it reads.
func (tx *Tx) AuditLog(limit int) ([]allocator.AuditEvent, error) {
	all := tx.auditEntries(0)
	all = all[len(all)-min(limit, len(all)):]
	out := tx.damagedAuditKeys()
	for _, e := range all {
		out = append(out, decodeAudit(e.v))
	}
	return out, nil
}

// damagedAuditKeys returns the entries of audit and auditq under keys that
// are no sequence, as AuditDamagedEntry events. It reads every key of both.
func (tx *Tx) damagedAuditKeys() []allocator.AuditEvent {
	var out []allocator.AuditEvent
	for _, b := range []*bolt.Bucket{tx.audit, tx.auditq} {
		if b == nil {
			continue
		}
		_ = b.ForEach(func(k, v []byte) error {
			if _, ok := auditSeq(k); ok {
				return nil
			}
			ev := decodeAudit(v)
			what := ev.Action
			if ev.Reason != "" {
				what += ": " + ev.Reason
			}
			out = append(out, allocator.AuditEvent{Time: ev.Time, Action: allocator.AuditDamagedEntry, IP: ev.IP,
				ContainerID: ev.ContainerID, IfName: ev.IfName,
				Reason: fmt.Sprintf("entry under the damaged key %x (no audit sequence; kept, never overwritten): %s", k, what)})
			return nil
		})
	}
	return out
}

// AuditSince returns the audit events whose sequence is above after, oldest
// first, and the log's last sequence (after when the log holds nothing
// newer). A log whose last sequence is below after is another log (the store
// was replaced or rebuilt): all of it is returned. Damaged entries are
// returned as AuditDamagedEntry.
func (tx *Tx) AuditSince(after uint64) ([]allocator.AuditEvent, uint64) {
	if max(lastSeq(tx.audit), lastSeq(tx.auditq)) < after {
		after = 0
	}
	var out []allocator.AuditEvent
	last := after
	for _, e := range tx.auditEntries(after) {
		out = append(out, decodeAudit(e.v))
		last = max(last, e.seq)
	}
	return out, last
}

// keyAuditReported is meta's record of the last audit sequence the daemon
// reported (8 bytes, big endian): its reports survive its restarts.
var keyAuditReported = []byte("audit_reported")

// AuditReported is the last audit sequence the daemon recorded as reported
// (SetAuditReported), 0 when none.
func (tx *Tx) AuditReported() uint64 {
	if v := tx.meta.Get(keyAuditReported); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// SetAuditReported records seq as the last audit sequence reported.
func (tx *Tx) SetAuditReported(seq uint64) error {
	return tx.meta.Put(keyAuditReported, binary.BigEndian.AppendUint64(nil, seq))
}
