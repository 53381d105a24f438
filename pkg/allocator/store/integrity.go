package store

import (
	"bytes"
	"net/netip"
	"slices"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// Records are the truth; everything else in a store is derived from them:
// the taken bitmap (what ADD reads to choose an address), the owner index
// (what DEL, CHECK and the commit marker read to find an attachment's
// records), the pod index (what ADD reads to find a pod's other sandboxes;
// pods.go; it also holds the entries whose delete is queued in poddrop),
// the imported index and the records count in meta. Every write
// keeps them in step, but bit rot, a bad restore or a bug can make one
// disagree. The rules, and what they cost on the hot path:
//
//   - ADD never writes an address that has a record (Tx.NextFree, Tx.Free).
//     The bitmap is trusted to choose a candidate; the candidate alone is
//     then checked against allocs (one lookup on the page the write touches
//     anyway). A record there means the bitmap is wrong: the indexes are
//     rebuilt from the records (RepairIndexes, audited and returned by
//     Repairs) and the choice is made again. Tx.Put refuses to overwrite
//     another owner's record.
//   - An attachment holding nothing is only believed when the indexes agree
//     with the records count: a verified lookup (allocator.Query.Verify)
//     looks in the owner index first (the common DEL finds its records
//     there and pays nothing more); when it finds
//     nothing, it compares the count in meta with the owner index's entries
//     (bbolt's page headers: no record is read) and the bitmap's bits. Only
//     a disagreement makes it read every record; in a write transaction it
//     then repairs the indexes, so the next call is fast again.
//   - A record that does not decode is quarantined, never fatal: its address
//     stays reserved (its bit stays set; ADD's check sees its key), reads
//     skip it and note it (DamagedSeen), DamagedRecords lists all of them,
//     allocator.ReleaseIP frees one on an operator's request.

func newDamaged(key, raw []byte, err error) allocator.DamagedRecord {
	ip, _ := keyAddr(key)
	d := allocator.DamagedRecord{IP: ip, Err: err, Raw: bytes.Clone(raw)}
	owner := salvageOwner(raw)
	d.ContainerID, d.IfName = owner.ContainerID, owner.IfName
	return d
}

// salvageOwner reads a binary record's owner fields as far as they are
// intact (they come fifth and sixth; see appendRecord).
func salvageOwner(raw []byte) allocator.Attachment {
	d := newDecUpTo(raw, recordNewestFormat) // the leading fields are the same in every format
	d.addr()
	d.smallInt()
	d.addr()
	d.smallInt()
	id := d.str()
	if d.err != nil {
		return allocator.Attachment{}
	}
	name := d.str()
	if d.err != nil {
		return allocator.Attachment{ContainerID: id}
	}
	return allocator.Attachment{ContainerID: id, IfName: name}
}

// noteDamaged remembers d for DamagedSeen, once per address.
func (tx *Tx) noteDamaged(d allocator.DamagedRecord) {
	if !slices.ContainsFunc(tx.damagedSeen, func(o allocator.DamagedRecord) bool {
		return o.IP == d.IP && bytes.Equal(o.Raw, d.Raw)
	}) {
		tx.damagedSeen = append(tx.damagedSeen, d)
	}
}

// DamagedSeen returns the damaged records this transaction met so far (reads
// skip them); callers log them.
func (tx *Tx) DamagedSeen() []allocator.DamagedRecord { return tx.damagedSeen }

// Repairs returns the index repairs this transaction made; callers log them
// (each is also in the audit log as AuditIndexRepair).
func (tx *Tx) Repairs() []allocator.IndexRepair { return tx.repairs }

// DamagedRecords reads every record and returns those that do not decode, in
// address order.
func (tx *Tx) DamagedRecords() []allocator.DamagedRecord {
	var out []allocator.DamagedRecord
	_ = tx.allocs.ForEach(func(k, v []byte) error {
		if _, err := decodeAt(k, v); err != nil {
			out = append(out, newDamaged(k, v, err))
		}
		return nil
	})
	return out
}

// indexesAgree is the cheap check behind a verified lookup (verifyNone): the records count in meta
// equals both the owner index's entries and the bitmap's bits. It reads the
// owner index's page headers and the bitmap's blocks, never a record.
func (tx *Tx) indexesAgree() bool {
	n, ok := tx.recordCount()
	if !ok || tx.owners == nil || tx.taken == nil {
		return false
	}
	return tx.owners.Stats().KeyN == n && takenBits{tx.taken}.count() == n
}

// damagedOwner is the owner under which the owner index lists a damaged
// record whose owner cannot be read, so that every record has exactly one
// entry (the counts in indexesAgree stay equal). No attachment has an empty
// container ID.
var damagedOwner = allocator.Attachment{}

// VerifyIndexes compares the indexes with the records without writing.
func (tx *Tx) VerifyIndexes() allocator.IndexRepair { return tx.compareIndexes("verify", false) }

// RepairIndexes makes the taken bitmap, the owner index and the records
// count agree with the records, and reports what it changed. A change is
// audited (AuditIndexRepair) and kept for Repairs. It reads every record.
func (tx *Tx) RepairIndexes(why string, now time.Time) (allocator.IndexRepair, error) {
	r := tx.compareIndexes(why, true)
	if tx.err != nil {
		err := tx.err
		tx.err = nil
		return r, err
	}
	if !r.Changed() {
		return r, nil
	}
	tx.repairs = append(tx.repairs, r)
	return r, tx.Audit(allocator.AuditEvent{Time: now, Action: allocator.AuditIndexRepair, Reason: r.String(), By: tx.actor()})
}

// derivedIndex describes one index derived from the records, for the index
// verifier: the IndexRepair counts it moves (added, removed), the entries
// the record under key k calls for (r nil: the record does not decode), how
// to read its bucket's entries and write one, and the entries it holds in
// excess on purpose (pending: a queued delete, neither stray nor, when a
// record calls for one, kept queued). An entry is opaque to the verifier:
// an owner or pod index key, or an address key for the taken bitmap.
type derivedIndex struct {
	added, removed *int
	entries        func(k, v []byte, r *allocator.Record) [][]byte
	has            func(e []byte) bool
	each           func(fn func(e []byte)) // every entry the index holds
	put, del       func(e []byte) error
	pending        *inlineQueue
	// absent: the index's bucket is missing (a store written before it
	// existed): nothing is written to it.
	absent bool
}

// derivedIndexes are the store's indexes that hold entries per record: the
// taken bitmap, the owner index and the pod index. (The imported index is
// checked where it is read, Records; the records count in compareIndexes.)
func (tx *Tx) derivedIndexes(rep *allocator.IndexRepair) []derivedIndex {
	bits := takenBits{tx.taken}
	addr := func(e []byte) netip.Addr { ip, _ := keyAddr(e); return ip }
	pods := tx.podDrops()
	return []derivedIndex{{
		added: &rep.BitsSet, removed: &rep.BitsCleared,
		entries: func(k, _ []byte, _ *allocator.Record) [][]byte {
			if _, ok := keyAddr(k); ok {
				return [][]byte{k}
			}
			return nil
		},
		has: func(e []byte) bool { return tx.taken != nil && bits.has(addr(e)) },
		each: func(fn func([]byte)) {
			tx.eachTakenBit(func(ip netip.Addr) { fn(addrKey(ip)) })
		},
		put: func(e []byte) error { return bits.set(addr(e), true) },
		del: func(e []byte) error { return bits.set(addr(e), false) },
	}, {
		added: &rep.OwnerAdded, removed: &rep.OwnerRemoved,
		entries: func(k, v []byte, r *allocator.Record) [][]byte {
			owner := damagedOwner
			if r != nil {
				owner = r.Attachment()
			} else if s := salvageOwner(v); s.ContainerID != "" {
				owner = s
			}
			return [][]byte{append(ownerPrefix(owner), k...)}
		},
		has:  func(e []byte) bool { return tx.owners != nil && tx.owners.Get(e) != nil },
		each: func(fn func([]byte)) { eachKey(tx.owners, fn) },
		put:  func(e []byte) error { return tx.owners.Put(e, nil) },
		del:  func(e []byte) error { return tx.owners.Delete(e) },
	}, {
		added: &rep.PodAdded, removed: &rep.PodRemoved,
		entries: func(k, _ []byte, r *allocator.Record) [][]byte {
			if r == nil || r.PodUID == "" {
				return nil
			}
			return [][]byte{append(podPrefix(r.PodUID), k...)}
		},
		has:     func(e []byte) bool { return tx.pods != nil && tx.pods.Get(e) != nil },
		each:    func(fn func([]byte)) { eachKey(tx.pods, fn) },
		put:     func(e []byte) error { return tx.pods.Put(e, nil) },
		del:     func(e []byte) error { return tx.pods.Delete(e) },
		pending: &pods,
		absent:  tx.pods == nil,
	}}
}

// eachKey calls fn with a copy of every key of b (none when b is nil).
func eachKey(b *bolt.Bucket, fn func([]byte)) {
	if b == nil {
		return
	}
	_ = b.ForEach(func(k, _ []byte) error {
		fn(bytes.Clone(k))
		return nil
	})
}

// eachTakenBit calls fn with every address whose taken bit is set, in the
// bitmap's well-formed blocks (badTakenBlocks lists the others).
func (tx *Tx) eachTakenBit(fn func(netip.Addr)) {
	if tx.taken == nil {
		return
	}
	_ = tx.taken.ForEach(func(k, v []byte) error {
		if !goodBlock(k, v) {
			return nil
		}
		for off := nextBit(v, 0, true); off < blockBits; off = nextBit(v, off+1, true) {
			fn(blockAddr(k, off))
		}
		return nil
	})
}

// badTakenBlocks lists the bitmap's blocks of the wrong length or under a
// key that is no block's.
func (tx *Tx) badTakenBlocks() [][]byte {
	var bad [][]byte
	if tx.taken != nil {
		_ = tx.taken.ForEach(func(k, v []byte) error {
			if !goodBlock(k, v) {
				bad = append(bad, bytes.Clone(k))
			}
			return nil
		})
	}
	return bad
}

func goodBlock(k, v []byte) bool {
	base, ok := keyAddr(k)
	bk, _ := blockOf(base)
	return ok && len(v) == blockBytes && bytes.Equal(bk, k)
}

// indexDiff is what one derived index lacks, holds in excess, and holds
// queued though a record calls for it.
type indexDiff struct {
	want                    map[string]bool
	missing, stray, unqueue [][]byte
}

// compareIndexes does VerifyIndexes and, with fix, RepairIndexes' writes
// (the first write error is left in tx.err; a derived bucket other than the
// pod index must exist when fix is set): one pass over the records
// collects what each derived index should hold, one pass over each index
// what it holds.
func (tx *Tx) compareIndexes(why string, fix bool) allocator.IndexRepair {
	rep := allocator.IndexRepair{Why: why, CountWas: -1}
	if n, ok := tx.recordCount(); ok {
		rep.CountWas = n
	}
	idxs := tx.derivedIndexes(&rep)
	diffs := make([]indexDiff, len(idxs))
	for i := range diffs {
		diffs[i].want = map[string]bool{}
	}
	var addrs [][]byte // the key of every record with a valid address
	_ = tx.allocs.ForEach(func(k, v []byte) error {
		rep.Records++
		if _, ok := keyAddr(k); ok {
			addrs = append(addrs, bytes.Clone(k))
		}
		r, err := decodeAt(k, v)
		if err != nil {
			r = nil
		}
		for i, x := range idxs {
			for _, e := range x.entries(k, v, r) {
				diffs[i].want[string(e)] = true
				switch {
				case !x.has(e):
					diffs[i].missing = append(diffs[i].missing, e)
				case x.pending != nil && x.pending.has(e):
					diffs[i].unqueue = append(diffs[i].unqueue, e) // the next flush would drop it
				}
			}
		}
		return nil
	})
	for i, x := range idxs {
		x.each(func(e []byte) {
			if !diffs[i].want[string(e)] && (x.pending == nil || !x.pending.has(e)) {
				diffs[i].stray = append(diffs[i].stray, e)
			}
		})
		*x.added, *x.removed = len(diffs[i].missing)+len(diffs[i].unqueue), len(diffs[i].stray)
	}
	if fix {
		tx.applyIndexDiffs(idxs, diffs, addrs)
		if rep.CountWas != rep.Records {
			tx.keep(tx.setRecordCount(rep.Records))
		}
	}
	return rep
}

// applyIndexDiffs writes compareIndexes' findings: the bitmap's malformed
// blocks go (and with them every record's bit is set again), then each
// index gets its missing entries and loses its stray ones, and a pending
// entry a record calls for leaves its queue.
func (tx *Tx) applyIndexDiffs(idxs []derivedIndex, diffs []indexDiff, addrs [][]byte) {
	if bad := tx.badTakenBlocks(); len(bad) > 0 {
		for _, k := range bad {
			tx.keep(tx.taken.Delete(k))
		}
		diffs[0].missing = addrs // idxs[0] is the bitmap
	}
	for i, x := range idxs {
		if !x.absent {
			for _, e := range diffs[i].missing {
				tx.keep(x.put(e))
			}
			for _, e := range diffs[i].stray {
				tx.keep(x.del(e))
			}
		}
		if x.pending != nil {
			for _, e := range append(diffs[i].unqueue, diffs[i].missing...) {
				tx.keep(x.pending.remove(e))
			}
		}
	}
}

// keep records err as the first write error of a multi-write helper.
func (tx *Tx) keep(err error) {
	if err != nil && tx.err == nil {
		tx.err = err
	}
}
