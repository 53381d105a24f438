package store

import (
	"bytes"
	"net/netip"
	"slices"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
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
//   - ADD never writes an address that has a record. The bitmap is trusted
//     to choose a candidate; the candidate alone is then checked against
//     allocs (one lookup on the page the write touches anyway). A record
//     there means the bitmap is wrong: both indexes are rebuilt from the
//     records (RepairIndexes, audited and returned by Repairs) and the choice
//     is made again. Tx.Put refuses to overwrite another owner's record.
//   - An attachment holding nothing is only believed when the indexes agree
//     with the records count: Held looks in the owner index first (the common
//     DEL finds its records there and pays nothing more); when it finds
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
	d.ContainerID, d.IfName = salvageOwner(raw)
	return d
}

// salvageOwner reads a binary record's owner fields as far as they are
// intact (they come fifth and sixth; see appendRecord).
func salvageOwner(raw []byte) (containerID, ifname string) {
	d := newDecUpTo(raw, recordNewestFormat) // the leading fields are the same in every format
	d.addr()
	d.smallInt()
	d.addr()
	d.smallInt()
	id := d.str()
	if d.err != nil {
		return "", ""
	}
	name := d.str()
	if d.err != nil {
		return id, ""
	}
	return id, name
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

// indexesAgree is the cheap check behind Held: the records count in meta
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
var damagedOwner = [2]string{"", ""}

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

// compareIndexes does VerifyIndexes and, with fix, RepairIndexes' writes
// (the first write error is left in tx.err).
func (tx *Tx) compareIndexes(why string, fix bool) allocator.IndexRepair {
	rep := allocator.IndexRepair{Why: why, CountWas: -1}
	if n, ok := tx.recordCount(); ok {
		rep.CountWas = n
	}
	write := func(err error) {
		if err != nil && tx.err == nil {
			tx.err = err
		}
	}
	keys := map[string]bool{}    // addrKey of every record with a valid address
	owners := map[string]bool{}  // owner index keys the records call for
	var missingBits []netip.Addr // records whose bit is clear
	var missingOwners [][]byte   // owner index keys to add
	pods := map[string]bool{}    // pod index keys the records call for
	var missingPods [][]byte     // pod index keys to add
	queued := map[string]bool{}  // pod index keys whose delete is deferred (poddrop)
	var unqueue [][]byte         // keys the records call for, queued for deletion
	if tx.poddrop != nil {
		_ = tx.poddrop.ForEach(func(k, _ []byte) error {
			queued[string(k)] = true
			return nil
		})
	}
	_ = tx.allocs.ForEach(func(k, v []byte) error {
		rep.Records++
		ip, ok := keyAddr(k)
		if ok {
			keys[string(k)] = true
			if tx.taken == nil || !(takenBits{tx.taken}).has(ip) {
				missingBits = append(missingBits, ip)
			}
		}
		owner := damagedOwner
		if r, err := decodeAt(k, v); err == nil {
			owner = [2]string{r.ContainerID, r.IfName}
			if r.PodUID != "" {
				pk := append(podPrefix(r.PodUID), k...)
				pods[string(pk)] = true
				if tx.pods == nil || tx.pods.Get(pk) == nil {
					missingPods = append(missingPods, pk)
				} else if queued[string(pk)] {
					unqueue = append(unqueue, pk) // the next flush would drop it
				}
			}
		} else if id, ifname := salvageOwner(v); id != "" {
			owner = [2]string{id, ifname}
		}
		ok2 := append(ownerPrefix(owner[0], owner[1]), k...)
		owners[string(ok2)] = true
		if tx.owners == nil || tx.owners.Get(ok2) == nil {
			missingOwners = append(missingOwners, ok2)
		}
		return nil
	})
	var strayBits []netip.Addr
	var badBlocks [][]byte // blocks of the wrong length or under a key that is no block's
	if tx.taken != nil {
		_ = tx.taken.ForEach(func(k, v []byte) error {
			base, ok := keyAddr(k)
			if bk, _ := blockOf(base); !ok || len(v) != blockBytes || !bytes.Equal(bk, k) {
				badBlocks = append(badBlocks, bytes.Clone(k))
				return nil
			}
			for off := nextBit(v, 0, true); off < blockBits; off = nextBit(v, off+1, true) {
				if a := blockAddr(k, off); !keys[string(addrKey(a))] {
					strayBits = append(strayBits, a)
				}
			}
			return nil
		})
	}
	rep.BitsCleared += len(badBlocks)
	var strayOwners [][]byte
	if tx.owners != nil {
		_ = tx.owners.ForEach(func(k, _ []byte) error {
			if !owners[string(k)] {
				strayOwners = append(strayOwners, bytes.Clone(k))
			}
			return nil
		})
	}
	var strayPods [][]byte
	if tx.pods != nil {
		_ = tx.pods.ForEach(func(k, _ []byte) error {
			if !pods[string(k)] && !queued[string(k)] {
				strayPods = append(strayPods, bytes.Clone(k))
			}
			return nil
		})
	}
	rep.PodAdded, rep.PodRemoved = len(missingPods)+len(unqueue), len(strayPods)
	rep.BitsSet, rep.BitsCleared = len(missingBits), len(strayBits)
	rep.OwnerAdded, rep.OwnerRemoved = len(missingOwners), len(strayOwners)
	if !fix {
		return rep
	}
	for _, k := range badBlocks {
		write(tx.taken.Delete(k))
	}
	if len(badBlocks) > 0 {
		// Their records' bits went with them: set every record's bit.
		missingBits = missingBits[:0]
		for k := range keys {
			ip, _ := keyAddr([]byte(k))
			missingBits = append(missingBits, ip)
		}
	}
	for _, a := range missingBits {
		write(takenBits{tx.taken}.set(a, true))
	}
	for _, a := range strayBits {
		write(takenBits{tx.taken}.set(a, false))
	}
	for _, k := range missingOwners {
		write(tx.owners.Put(k, nil))
	}
	for _, k := range strayOwners {
		write(tx.owners.Delete(k))
	}
	if tx.pods != nil {
		for _, k := range missingPods {
			write(tx.pods.Put(k, nil))
		}
		for _, k := range strayPods {
			write(tx.pods.Delete(k))
		}
	}
	for _, k := range append(unqueue, missingPods...) {
		if queued[string(k)] {
			write(tx.poddrop.Delete(k))
		}
	}
	if rep.CountWas != rep.Records {
		write(tx.setRecordCount(rep.Records))
	}
	return rep
}
