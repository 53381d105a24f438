package store

// The imported index: the records imported from host-local (Source
// SourceHostLocal) that are still held.

import (
	"bytes"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// HostLocalRecords returns the records imported from host-local that are
// still held, in address order, as the imported index lists them: one cursor
// step while it lists none. An entry whose record is gone or is no longer
// host-local's is skipped (and dropped in a write transaction); a damaged
// record is skipped (left to the operator).
func (tx *Tx) HostLocalRecords() ([]*allocator.Record, error) {
	if tx.imported == nil {
		return nil, nil // a read-only view of a store that lost the index
	}
	if k, _ := tx.imported.Cursor().First(); k == nil {
		return nil, nil
	}
	var keys [][]byte
	_ = tx.imported.ForEach(func(k, _ []byte) error {
		keys = append(keys, bytes.Clone(k))
		return nil
	})
	var out []*allocator.Record
	for _, k := range keys {
		var r *allocator.Record
		ip, ok := keyAddr(k)
		if ok {
			var d *allocator.DamagedRecord
			if r, d = tx.Lookup(ip); d != nil {
				continue
			}
		}
		if r == nil || r.Source != allocator.SourceHostLocal {
			if tx.btx.Writable() {
				if err := tx.imported.Delete(k); err != nil {
					return out, err
				}
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
