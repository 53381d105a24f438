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
