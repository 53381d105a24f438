package store

// Inline queues: buckets small enough for bbolt to keep in the root page.

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// inlineQueue is a bucket kept small enough for bbolt to store it inline in
// its parent's page, the root page, which every write transaction rewrites
// anyway: adding to it dirties no page of its own. The caller moves the
// queued entries elsewhere when the next one would not fit (add reports it;
// drain empties the queue). Two use it: the audit log's newest entries
// (auditq, Tx.Audit) and the pod index entries whose delete is deferred
// (poddrop, Tx.dropPodEntry). What a page written costs: docs/benchmarks.md,
// "DEL's pages".
//
// A store written before a queue existed lacks its bucket: the first add
// creates it (an inline bucket, so no page of its own either).
type inlineQueue struct {
	tx   *Tx
	b    **bolt.Bucket // the Tx's field: nil until the bucket exists
	name []byte
}

func (tx *Tx) auditQueue() inlineQueue { return inlineQueue{tx, &tx.auditq, bucketAuditQueue} }
func (tx *Tx) podDrops() inlineQueue   { return inlineQueue{tx, &tx.poddrop, bucketPodDrops} }

// add puts (k, v) in the queue if the queue still fits inline with it, and
// reports whether it did.
func (q inlineQueue) add(k, v []byte) (bool, error) {
	if *q.b == nil {
		nb, err := q.tx.btx.CreateBucketIfNotExists(q.name)
		if err != nil {
			return false, err
		}
		*q.b = nb
	}
	if inlineSize(*q.b)+inlineEntrySize(k, v) > q.tx.inlineLimit() {
		return false, nil
	}
	return true, (*q.b).Put(k, v)
}

// queued is one entry of a queue.
type queued struct{ k, v []byte }

// drain empties the queue and returns its entries in key order.
func (q inlineQueue) drain() ([]queued, error) {
	all := q.entries()
	for _, e := range all {
		if err := (*q.b).Delete(e.k); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// entries returns the queued entries in key order (copies).
func (q inlineQueue) entries() []queued {
	var out []queued
	if *q.b == nil {
		return nil
	}
	_ = (*q.b).ForEach(func(k, v []byte) error {
		out = append(out, queued{bytes.Clone(k), bytes.Clone(v)})
		return nil
	})
	return out
}

// has reports whether k is queued.
func (q inlineQueue) has(k []byte) bool { return *q.b != nil && (*q.b).Get(k) != nil }

// remove takes k out of the queue if it is there.
func (q inlineQueue) remove(k []byte) error {
	if !q.has(k) {
		return nil
	}
	return (*q.b).Delete(k)
}

// inlineLimit is the most an inline bucket may hold (bbolt inlines a bucket
// whose single leaf, page header included, is at most a quarter page).
func (tx *Tx) inlineLimit() int { return tx.btx.DB().Info().PageSize / 4 }

// inlineEntrySize is what one key and value add to an inline bucket's leaf
// (bbolt's leaf element header is 16 bytes).
func inlineEntrySize(k, v []byte) int { return 16 + len(k) + len(v) }

// inlineSize is the size of b's leaf: the page header (16 bytes) and its
// entries.
func inlineSize(b *bolt.Bucket) int {
	n := 16
	_ = b.ForEach(func(k, v []byte) error {
		n += inlineEntrySize(k, v)
		return nil
	})
	return n
}
