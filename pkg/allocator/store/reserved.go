package store

// Reading the reserved addresses (the taken bitmap, bitmap.go).

import (
	"net/netip"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// Reserved walks the reserved addresses in address order (see Tx.reserved).
func (tx *Tx) Reserved() allocator.TakenIter { return tx.reserved.iter() }

// reservedIndex is what a transaction reads the reserved addresses from: the
// taken bitmap, or, in a read-only view of a store that lost its bitmap bucket
// (damage; the next read-write open rebuilds it from the records), the
// records' keys. wrapTx picks one; a read-write transaction always has the
// bitmap.
type reservedIndex interface {
	has(ip netip.Addr) bool
	count() int
	iter() allocator.TakenIter
}

// recordKeys is a reservedIndex over the allocs bucket's keys.
type recordKeys struct{ b *bolt.Bucket }

func (r recordKeys) has(ip netip.Addr) bool { return r.b.Get(addrKey(ip)) != nil }

func (r recordKeys) count() int { return r.b.Stats().KeyN }

func (r recordKeys) iter() allocator.TakenIter { return &keysIter{r.b.Cursor()} }

// keysIter walks address keys with a bucket cursor.
type keysIter struct{ c *bolt.Cursor }

func (it *keysIter) Seek(from netip.Addr) (netip.Addr, bool) {
	k, _ := it.c.Seek(addrKey(from))
	return keyAddr(k)
}

func (it *keysIter) Next() (netip.Addr, bool) {
	k, _ := it.c.Next()
	return keyAddr(k)
}

// Taken reports whether ip is reserved, without decoding the record. It reads
// the taken bitmap, a derived index: ADD verifies what it chooses against the
// records (see allocator.Allocate).
func (tx *Tx) Taken(ip netip.Addr) bool { return tx.reserved.has(ip) }

// Count is the number of reserved addresses (it counts the taken bitmap's bits).
func (tx *Tx) Count() int { return tx.reserved.count() }
