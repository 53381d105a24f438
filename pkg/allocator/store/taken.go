package store

// Reading the taken addresses (the taken bitmap, bitmap.go), and choosing a
// free one verified against the records.

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// TakenAddrs walks the taken addresses in address order (see Tx.takenIdx).
func (tx *Tx) TakenAddrs() allocator.TakenIter { return tx.takenIdx.iter() }

// Free reports whether ip is free (allocator.Store): its taken bit is
// clear and it has no record. A record whose bit is clear makes a write
// transaction rebuild the indexes from the records (audited).
func (tx *Tx) Free(ip netip.Addr, now time.Time) (bool, error) {
	taken, recorded := tx.Taken(ip), tx.allocs.Get(addrKey(ip)) != nil
	if recorded && !taken && tx.btx.Writable() {
		if _, err := tx.RepairIndexes(fmt.Sprintf("ADD: requested %s has a record but the taken bitmap marked it free", ip), now); err != nil {
			return false, err
		}
	}
	return !taken && !recorded, nil
}

// NextFree is allocator.NextFree over the taken bitmap, verified against the
// records (allocator.Store): the bitmap is trusted to choose a candidate,
// and the candidate alone is then checked against allocs (one lookup on the
// page the write touches anyway). A record there means the bitmap lost its
// bit: in a write transaction the indexes are rebuilt from the records
// (audited) and the choice is made again; a read-only transaction answers
// from the bitmap as it is.
func (tx *Tx) NextFree(set allocator.StoredRangeSet, last netip.Addr, hasLast bool, now time.Time) (netip.Addr, int, bool, error) {
	for repaired := false; ; repaired = true {
		ip, ri, ok := allocator.NextFree(set, last, hasLast, tx.TakenAddrs())
		if !ok || !tx.btx.Writable() || tx.allocs.Get(addrKey(ip)) == nil {
			return ip, ri, ok, nil
		}
		if repaired {
			return ip, ri, false, fmt.Errorf("taken bitmap still marks %s free after its repair from the records", ip)
		}
		if _, err := tx.RepairIndexes(fmt.Sprintf("ADD: %s has a record but the taken bitmap marked it free", ip), now); err != nil {
			return ip, ri, false, err
		}
	}
}

// takenIndex is what a transaction reads the taken addresses from: the
// taken bitmap, or, in a read-only view of a store that lost its bitmap bucket
// (damage; the next read-write open rebuilds it from the records), the
// records' keys. wrapTx picks one; a read-write transaction always has the
// bitmap.
type takenIndex interface {
	has(ip netip.Addr) bool
	count() int
	iter() allocator.TakenIter
}

// recordKeys is a takenIndex over the allocs bucket's keys.
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

// Taken reports whether ip's taken bit is set, without reading the record.
// It reads the taken bitmap, a derived index: Free and NextFree verify it
// against the records.
func (tx *Tx) Taken(ip netip.Addr) bool { return tx.takenIdx.has(ip) }

// Count is the number of taken addresses (it counts the taken bitmap's bits).
func (tx *Tx) Count() int { return tx.takenIdx.count() }
