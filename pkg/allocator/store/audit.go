package store

import (
	"bytes"
	"encoding/binary"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Audit appends ev to the bounded audit log. The oldest entries are dropped
// auditPrune at a time, so the log holds between auditLimit and
// auditLimit+auditPrune-1 entries and most appends touch only the log's end.
func (tx *Tx) Audit(ev allocator.AuditEvent) error {
	seq, err := tx.audit.NextSequence()
	if err != nil {
		return err
	}
	if err := tx.audit.Put(binary.BigEndian.AppendUint64(nil, seq), appendAudit(&ev)); err != nil {
		return err
	}
	if seq%auditPrune != 0 || seq <= auditLimit {
		return nil
	}
	// Entries are dense: everything up to seq-auditLimit falls out of the window.
	cutoff := binary.BigEndian.AppendUint64(nil, seq-auditLimit)
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

// AuditLog returns up to limit most recent audit events, oldest first.
func (tx *Tx) AuditLog(limit int) ([]allocator.AuditEvent, error) {
	var out []allocator.AuditEvent
	c := tx.audit.Cursor()
	for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
		ev, err := readAudit(v)
		if err != nil {
			// A damaged entry is shown as such; it never hides the others.
			ev = allocator.AuditEvent{Action: allocator.AuditDamagedEntry, Reason: err.Error()}
		}
		out = append(out, ev)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// AuditSince returns the audit events whose sequence is above after, oldest
// first, and the log's last sequence (after when the log holds nothing
// newer). A log whose last sequence is below after is another log (the store
// was replaced or rebuilt): all of it is returned. Damaged entries are
// returned as AuditDamagedEntry.
func (tx *Tx) AuditSince(after uint64) ([]allocator.AuditEvent, uint64) {
	var out []allocator.AuditEvent
	c := tx.audit.Cursor()
	if k, _ := c.Last(); k == nil || len(k) != 8 || binary.BigEndian.Uint64(k) < after {
		after = 0
	}
	last := after
	for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, after+1)); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			continue
		}
		ev, err := readAudit(v)
		if err != nil {
			ev = allocator.AuditEvent{Action: allocator.AuditDamagedEntry, Reason: err.Error()}
		}
		out = append(out, ev)
		last = binary.BigEndian.Uint64(k)
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
