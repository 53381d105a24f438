package store

// Records: the one lookup of records by query, through the index that
// answers it.

import (
	"bytes"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// Records returns the records q selects, in address order (see
// allocator.Query). A selected record that does not decode is skipped and
// noted (DamagedSeen): its address stays reserved.
//
//   - Attachment: the owner index (one seek); with Verify, an empty answer
//     is checked (verifyNone). A read-only view of a store that lost the
//     index reads every record.
//   - PodUID: the pod index (one seek). Its entries in excess (a queued
//     delete, poddrop) are told apart by reading the record.
//   - Imported: the imported index, one cursor step while it lists none.
//     An entry whose record is gone or is no longer host-local's is skipped
//     (and dropped in a write transaction).
//   - none of them: every record.
func (tx *Tx) Records(q allocator.Query) ([]*allocator.Record, error) {
	switch {
	case q.Attachment != nil && tx.owners == nil:
		// A read-only view of a store that lost its owner index (damage;
		// the next read-write open restores it).
		return filter(tx.scanOwner(*q.Attachment), q), nil
	case q.Attachment != nil:
		recs := tx.indexed(tx.owners, ownerPrefix(*q.Attachment), q)
		if len(recs) > 0 || !q.Verify {
			return recs, nil
		}
		recs, err := tx.verifyNone(*q.Attachment)
		return filter(recs, q), err
	case q.PodUID != "" && tx.pods != nil:
		return tx.indexed(tx.pods, podPrefix(q.PodUID), q), nil
	case q.Imported:
		return tx.importedRecords(q)
	}
	var out []*allocator.Record
	err := tx.ForEach(func(r *allocator.Record) error {
		if q.Matches(r) {
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// indexed reads the records an index lists under prefix (its keys are
// prefix and an address key) and keeps those q matches.
func (tx *Tx) indexed(b *bolt.Bucket, prefix []byte, q allocator.Query) []*allocator.Record {
	var out []*allocator.Record
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		key := k[len(prefix):]
		v := tx.allocs.Get(key)
		if v == nil {
			continue
		}
		r, err := decodeAt(key, v)
		if err != nil {
			tx.noteDamaged(newDamaged(key, v, err))
			continue
		}
		if q.Matches(r) {
			out = append(out, r)
		}
	}
	return out
}

// importedRecords answers q through the imported index.
func (tx *Tx) importedRecords(q allocator.Query) ([]*allocator.Record, error) {
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
		if ip, ok := keyAddr(k); ok {
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
		if q.Matches(r) {
			out = append(out, r)
		}
	}
	return out, nil
}

func filter(recs []*allocator.Record, q allocator.Query) []*allocator.Record {
	var out []*allocator.Record
	for _, r := range recs {
		if q.Matches(r) {
			out = append(out, r)
		}
	}
	return out
}
