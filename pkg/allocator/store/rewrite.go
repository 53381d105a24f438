package store

import (
	"bytes"
	"errors"
	"slices"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Rewrite is the new value of one record a scan saw, encoded before the write
// transaction that stores it, so that the writer's exclusive lock covers only
// a compare and a put per record (see Tx.PutIfUnchanged).
type Rewrite struct {
	key, seen, val []byte
	next           *allocator.Record // what val encodes
}

// errNotSameAllocation refuses a rewrite that would change what the indexes
// are keyed by.
var errNotSameAllocation = errors.New("rewrite of another allocation")

// PrepareRewrite encodes next as the new value of the record s saw. next must
// be the same allocation (allocator.SameAllocation) from the same source (the
// imported index follows it) and pod UID (the pod index follows it), with
// only fields the indexes do not depend on
// changed, such as the daemon's observation or
// the commit state; anything else is refused. next must not be modified
// afterwards: once stored, it may become the cache's record for val (see
// RecordCache.Stored).
func PrepareRewrite(s Seen, next *allocator.Record) (Rewrite, error) {
	if s.Rec == nil || s.raw == nil || !allocator.SameAllocation(s.Rec, next) || next.Source != s.Rec.Source || next.PodUID != s.Rec.PodUID {
		return Rewrite{}, errNotSameAllocation
	}
	val, err := encodeRecord(next)
	if err != nil {
		return Rewrite{}, err
	}
	return Rewrite{key: addrKey(next.IP), seen: s.raw, val: val, next: next}, nil
}

// PutIfUnchanged stores w if the record's stored bytes are still exactly those
// its scan saw, and reports whether it did. Equal bytes prove that the same
// allocation is there, unchanged since the scan, so the owners and taken
// indexes already hold its entries (every write keeps them in step with
// allocs) and only the value is replaced: no decoding of the old value, no
// index writes. When it reports false, the record was released, re-allocated
// or rewritten since the scan, and nothing was written: the caller must look
// at the record as it is now (Get, then Put).
func (tx *Tx) PutIfUnchanged(w Rewrite) (bool, error) {
	cur := tx.allocs.Get(w.key)
	if cur == nil || !bytes.Equal(cur, w.seen) {
		return false, nil
	}
	return true, tx.allocs.Put(w.key, w.val)
}

// Stored tells the cache that w was committed (PutIfUnchanged reported true
// and the transaction committed), so the next scan finds w's bytes already
// decoded instead of decoding them again. It is a no-op unless the cache
// still holds the bytes w replaced. The cache pairs a record with the bytes it
// was encoded to, never with a key alone, so a wrong call costs the next scan
// a decode, never a wrong record (TestStoredPrimesCache checks that the
// encoding gives back exactly the record).
func (c *RecordCache) Stored(w Rewrite) {
	i, found := slices.BinarySearchFunc(c.entries, w.key, func(e cachedRecord, k []byte) int { return bytes.Compare(e.key, k) })
	if !found || !bytes.Equal(c.entries[i].raw, w.seen) || w.next == nil {
		return
	}
	// The key too: the old one shares its array with the bytes replaced.
	c.entries[i] = cachedRecord{key: w.key, raw: w.val, rec: w.next}
}
