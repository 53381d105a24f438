package store

// The pod index (poduid): a pod's records without reading the others, for
// ADD's release of the pod's dead sandboxes (allocator.ReleaseReplaced).
//
// It is derived like the owner index (integrity.go) but only ever used to
// free: an entry it lacks costs a release the plugin does not make (the
// daemon's rules still apply), never an address handed out twice; an entry
// it has in excess is told apart by reading the record it points at. A
// released record's entry is deleted later, with others (dropPodEntry): the
// index holds exactly the records' entries and the queued ones.

import (
	"bytes"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// ByPodUID returns the records whose PodUID is uid, in address order, as the
// pod index lists them (one seek; each listed record is read and its UID
// compared). A listed record that does not decode is skipped and noted
// (DamagedSeen). An empty uid has no records. A read-only view of a store
// without the index reads every record.
func (tx *Tx) ByPodUID(uid string) ([]*allocator.Record, error) {
	if uid == "" {
		return nil, nil
	}
	var out []*allocator.Record
	if tx.pods == nil {
		err := tx.ForEach(func(r *allocator.Record) error {
			if r.PodUID == uid {
				out = append(out, r)
			}
			return nil
		})
		return out, err
	}
	prefix := podPrefix(uid)
	c := tx.pods.Cursor()
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
		if r.PodUID == uid {
			out = append(out, r)
		}
	}
	return out, nil
}

// putPodEntry indexes r (stored under key) by its pod UID, if it has one.
// An entry whose delete was deferred (podDrops) and that r calls for again
// leaves the queue, so that no flush deletes it.
func (tx *Tx) putPodEntry(r *allocator.Record, key []byte) error {
	if r.PodUID == "" || tx.pods == nil {
		return nil
	}
	k := append(podPrefix(r.PodUID), key...)
	if tx.poddrop != nil && tx.poddrop.Get(k) != nil {
		if err := tx.poddrop.Delete(k); err != nil {
			return err
		}
	}
	return tx.pods.Put(k, nil)
}

// dropPodEntry deletes prev's pod index entry unless the record replacing it
// has the same UID (keep). The delete is deferred: the entry's key joins
// poddrop, a queue kept inline in the root page (which every write rewrites
// anyway), and the queued entries are deleted together when the queue is
// full. Deleting the entry at once dirtied a leaf, a branch and the root of
// the pod index: 3 of the 13 pages a DEL wrote at 99.9 % of a /16 (measured
// in-process with bbolt's TxStats; 10 with the queue; what a page costs and
// the benchmark runs: Tx.Audit and docs/benchmarks.md, "DEL's pages").
// Until then the entry is in excess, which ByPodUID tells apart by reading
// its record, and which compareIndexes counts as queued, not stray.
func (tx *Tx) dropPodEntry(prev *allocator.Record, keep string) error {
	if prev.PodUID == "" || prev.PodUID == keep || tx.pods == nil {
		return nil
	}
	k := append(podPrefix(prev.PodUID), addrKey(prev.IP)...)
	q, err := tx.podDrops()
	if err != nil {
		return err
	}
	if queueSize(q)+inlineEntrySize(k, podDropMark) <= tx.inlineLimit() {
		return q.Put(k, podDropMark)
	}
	return tx.flushPodDrops(q, k)
}

// podDropMark is a queued key's value (not empty: bbolt returns nil for an
// empty value put in the same transaction, which would read as absent).
var podDropMark = []byte{1}

// podDrops returns the poddrop bucket (see lazyBucket).
func (tx *Tx) podDrops() (*bolt.Bucket, error) { return tx.lazyBucket(&tx.poddrop, bucketPodDrops) }

// flushPodDrops deletes the queued pod index entries, and extra's, and
// empties the queue.
func (tx *Tx) flushPodDrops(q *bolt.Bucket, extra []byte) error {
	keys := [][]byte{extra}
	_ = q.ForEach(func(k, _ []byte) error {
		keys = append(keys, bytes.Clone(k))
		return nil
	})
	for _, k := range keys[1:] {
		if err := q.Delete(k); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if err := tx.pods.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// dropPodEntries deletes every pod index entry for the address key (a walk
// of the index: only for records whose UID cannot be read).
func (tx *Tx) dropPodEntries(key []byte) error {
	if tx.pods == nil {
		return nil
	}
	var drop [][]byte
	c := tx.pods.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) == 8+len(key) && bytes.Equal(k[8:], key) {
			drop = append(drop, bytes.Clone(k))
		}
	}
	for _, k := range drop {
		if err := tx.pods.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
