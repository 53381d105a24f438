package store

import (
	"bytes"
	"runtime"
	"sync"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// RecordCache keeps the records a reader decoded, each with the exact stored
// bytes it was decoded from, in address order, so that a reader that scans a
// store again and again (the daemon, every sweep) decodes only the records
// whose bytes changed. Cached records are shared: callers must not modify them.
//
// A cache belongs to one reader: one scan at a time, each decoded (or
// dropped) before the next.
type RecordCache struct {
	entries []cachedRecord // in key order, as the last decoded scan saw them
	spare   []cachedRecord // the array before that one, reused by the next scan
}

type cachedRecord struct {
	key []byte // copies: bbolt's bytes live only as long as the transaction
	raw []byte
	rec *allocator.Record // nil until decoded, or when raw does not decode
	err error             // why raw does not decode (kept, so it is not decoded again)
}

// Seen is one record as a scan saw it: the decoded record and the stored bytes
// it was decoded from. A later write compares the bytes to learn, without
// decoding anything, that the record has not changed since (see
// Tx.PutIfUnchanged).
type Seen struct {
	// Rec is shared with the cache: never modify it.
	Rec *allocator.Record
	raw []byte
}

// RecordScan is what one read transaction copied out of the allocs bucket for
// a later Decode: every record in address order, either as the cache entry
// whose bytes it still has or as a copy of its bytes.
type RecordScan struct {
	cache   *RecordCache
	items   []cachedRecord
	fresh   int // items whose bytes were copied (to decode)
	damaged []allocator.DamagedRecord
}

// ScanRecords walks every record and copies out only what changed since the
// cache's last scan, decoding nothing: a reader's transaction, and the store
// lock that comes with it, lasts no longer than the walk. Call Decode on the
// result once the store is closed.
func (tx *Tx) ScanRecords(cache *RecordCache) *RecordScan {
	old := cache.entries
	s := &RecordScan{cache: cache, items: cache.spare[:0]}
	cache.spare = nil
	if cap(s.items) < len(old) {
		s.items = make([]cachedRecord, 0, len(old)+len(old)/8+16)
	}
	j := 0
	c := tx.allocs.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		// Both sides are in key order: one merge pass, no lookups.
		for j < len(old) && bytes.Compare(old[j].key, k) < 0 {
			j++
		}
		if j < len(old) && bytes.Equal(old[j].key, k) && bytes.Equal(old[j].raw, v) {
			s.items = append(s.items, old[j])
			j++
			continue
		}
		b := make([]byte, len(k)+len(v)) // one allocation for both copies
		copy(b, k)
		copy(b[len(k):], v)
		s.items = append(s.items, cachedRecord{key: b[:len(k):len(k)], raw: b[len(k):]})
		s.fresh++
	}
	return s
}

// Decode decodes the records the scan copied, makes the scan the cache's new
// content (records gone from the store are dropped) and returns every record
// that decodes, in address order. A record that does not decode never fails
// the scan: it is left out and listed by Damaged (its address stays reserved
// in the store); the cache remembers it, so it is not decoded again until its
// bytes change. The error is always nil (kept for callers written when one
// damaged record failed the whole scan).
func (s *RecordScan) Decode() ([]Seen, error) {
	decodeItems(s.items, s.fresh)
	out := make([]Seen, 0, len(s.items))
	s.damaged = nil
	for _, it := range s.items {
		if it.err != nil {
			s.damaged = append(s.damaged, newDamaged(it.key, it.raw, it.err))
			continue
		}
		out = append(out, Seen{Rec: it.rec, raw: it.raw})
	}
	old := s.cache.entries
	clear(old) // keep no record alive through the spare array
	s.cache.entries, s.cache.spare = s.items, old[:0]
	s.items = nil
	return out, nil
}

// Damaged lists the records of the scan that do not decode, in address
// order (valid after Decode).
func (s *RecordScan) Damaged() []allocator.DamagedRecord { return s.damaged }

// decodeParallelMin is the least number of records worth decoding on more
// than one goroutine (a first sweep decodes every record; later sweeps only a
// few).
const decodeParallelMin = 1024

// decodeItems decodes every item not decoded yet; fresh is how many there are.
// Many are split over GOMAXPROCS goroutines. An item that does not decode
// keeps its error.
func decodeItems(items []cachedRecord, fresh int) {
	workers := min(runtime.GOMAXPROCS(0), fresh/(decodeParallelMin/2))
	if workers <= 1 {
		decodeRange(items)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		part := items[w*len(items)/workers : (w+1)*len(items)/workers]
		wg.Go(func() { decodeRange(part) })
	}
	wg.Wait()
}

// decodeRange decodes the items of part not decoded yet.
func decodeRange(part []cachedRecord) {
	for i := range part {
		it := &part[i]
		if it.rec != nil || it.err != nil {
			continue
		}
		r, err := decodeAt(it.key, it.raw)
		if err != nil {
			ip, _ := keyAddr(it.key)
			it.err = &recordError{ip: ip.String(), err: err}
			continue
		}
		it.rec = r
	}
}

type recordError struct {
	ip  string
	err error
}

func (e *recordError) Error() string { return "record " + e.ip + ": " + e.err.Error() }

func (e *recordError) Unwrap() error { return e.err }
