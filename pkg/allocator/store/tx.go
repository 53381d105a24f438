package store

import (
	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// Tx is one transaction on a store. Every write keeps the derived indexes
// (takenbits, ownerhash, poduid, imported, the records count) in step with allocs: a
// record and its index entries are put and deleted together (a pod index
// entry's delete is queued in the same transaction: dropPodEntry). The indexes are
// still only derived: where they are used to decide something that matters
// they are verified against the records (see integrity.go).
type Tx struct {
	btx                                                      *bolt.Tx
	meta, allocs, taken, owners, exhaustion, audit, imported *bolt.Bucket
	pods                                                     *bolt.Bucket
	// auditq is the audit log's queue (Audit); nil in a store written
	// before it existed, until the first Audit creates it.
	auditq *bolt.Bucket
	// poddrop is the queue of pod index entries to delete (dropPodEntry);
	// nil in a store written before it existed, until the first release
	// of a record with a pod UID creates it.
	poddrop *bolt.Bucket
	// takenIdx reads the taken addresses: the taken bitmap (see wrapTx).
	takenIdx takenIndex

	// damagedSeen are the undecodable records this transaction met (each
	// once); repairs the index repairs it made. Callers log them.
	damagedSeen []allocator.DamagedRecord
	repairs     []allocator.IndexRepair
	err         error // first write error of a multi-write helper
	// by is who acts (OpenOptions.By), named by the audit entries the store
	// writes on its own.
	by string
}

// actor is the By of the audit entries the store writes on its own.
func (tx *Tx) actor() string {
	if tx.by == "" {
		return "hostlease"
	}
	return tx.by
}

// Tx implements the allocation policy's view of a store.
var _ allocator.Store = (*Tx)(nil)
