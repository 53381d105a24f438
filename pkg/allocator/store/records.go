package store

// Records: the allocs bucket, the truth, and the index entries every write
// keeps in step with it.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Get returns the record holding ip, or nil. A record that does not decode
// is an error (see Lookup for one that tells the two apart).
func (tx *Tx) Get(ip netip.Addr) (*allocator.Record, error) {
	key := addrKey(ip)
	v := tx.allocs.Get(key)
	if v == nil {
		return nil, nil
	}
	return decodeAt(key, v)
}

// Lookup returns the record holding ip, or the damaged record there, or
// neither when the address has no record.
func (tx *Tx) Lookup(ip netip.Addr) (*allocator.Record, *allocator.DamagedRecord) {
	key := addrKey(ip)
	v := tx.allocs.Get(key)
	if v == nil {
		return nil, nil
	}
	r, err := decodeAt(key, v)
	if err != nil {
		d := newDamaged(key, v, err)
		return nil, &d
	}
	return r, nil
}

// HasRecord reports whether ip has a record, healthy or damaged. Unlike
// Taken it reads the records, the truth.
func (tx *Tx) HasRecord(ip netip.Addr) bool { return tx.allocs.Get(addrKey(ip)) != nil }

// Put writes r under r.IP and indexes it by owner and in the taken index.
// The address must be free or held by r's own attachment (the same
// containerID and ifname): otherwise Put writes nothing and returns an error
// wrapping ErrAddressReserved.
func (tx *Tx) Put(r *allocator.Record) error {
	key := addrKey(r.IP)
	if old := tx.allocs.Get(key); old != nil {
		prev, err := decodeAt(key, old)
		if err != nil {
			return fmt.Errorf("%w: %s has a damaged record (%v); it stays reserved until released (hostlease-gc release %s)", allocator.ErrAddressReserved, r.IP, err, r.IP)
		}
		if prev.Attachment() != r.Attachment() {
			return fmt.Errorf("%w: %s is held by container %s ifname %q, not %s ifname %q",
				allocator.ErrAddressReserved, r.IP, prev.ContainerID, prev.IfName, r.ContainerID, r.IfName)
		}
		if err := tx.dropPodEntry(prev, r.PodUID); err != nil {
			return err
		}
		return tx.putRecord(r, key, false)
	}
	return tx.putRecord(r, key, true)
}

// Replace writes r under r.IP whoever held the address, and returns what was
// there: the previous record (of any owner), or the damaged record, or
// neither. It is for the daemon's re-reservation of an address a running
// sandbox uses: the caller audits the takeover.
func (tx *Tx) Replace(r *allocator.Record) (*allocator.Record, *allocator.DamagedRecord, error) {
	key := addrKey(r.IP)
	old := tx.allocs.Get(key)
	if old == nil {
		return nil, nil, tx.putRecord(r, key, true)
	}
	prev, derr := decodeAt(key, old)
	var damaged *allocator.DamagedRecord
	if derr != nil {
		d := newDamaged(key, old, derr)
		damaged = &d
		// Its owner is unknown: drop whatever index entry points at it.
		if err := tx.dropOwnerEntries(key); err != nil {
			return nil, nil, err
		}
		if err := tx.dropPodEntries(key); err != nil {
			return nil, nil, err
		}
	} else {
		if prev.Attachment() != r.Attachment() {
			if err := tx.owners.Delete(append(ownerPrefix(prev.Attachment()), key...)); err != nil {
				return nil, nil, err
			}
		}
		if err := tx.dropPodEntry(prev, r.PodUID); err != nil {
			return nil, nil, err
		}
	}
	return prev, damaged, tx.putRecord(r, key, false)
}

// putRecord stores r and its index entries; isNew says key had no record.
// The imported index lists exactly the records whose Source is
// SourceHostLocal.
func (tx *Tx) putRecord(r *allocator.Record, key []byte, isNew bool) error {
	v, err := encodeRecord(r)
	if err != nil {
		return err
	}
	if err := tx.allocs.Put(key, v); err != nil {
		return err
	}
	if err := (takenBits{tx.taken}).set(r.IP, true); err != nil {
		return err
	}
	if err := tx.owners.Put(append(ownerPrefix(r.Attachment()), key...), nil); err != nil {
		return err
	}
	if err := tx.putPodEntry(r, key); err != nil {
		return err
	}
	if r.Source == allocator.SourceHostLocal {
		if err := tx.imported.Put(key, nil); err != nil {
			return err
		}
	} else if !isNew {
		// Deleting a key that is not there touches no page.
		if err := tx.imported.Delete(key); err != nil {
			return err
		}
	}
	if isNew {
		return tx.addRecords(1)
	}
	return nil
}

// remove deletes whatever record holds ip (and its index entries), without
// an audit entry, and returns it, or nil when the address was free (a
// damaged record as a Record with only its IP set). Only the store's tests
// delete without auditing.
func (tx *Tx) remove(ip netip.Addr) (*allocator.Record, error) {
	switch r, d := tx.Lookup(ip); {
	case d != nil:
		return &allocator.Record{IP: ip}, tx.deleteDamaged(ip)
	case r != nil:
		return r, tx.deleteRecord(r)
	}
	return nil, nil
}

// Release deletes r, read from this transaction (so its owner is the stored
// one), and its index entries, and appends ev to the audit log: the only
// delete of a healthy record (allocator.Store).
func (tx *Tx) Release(r *allocator.Record, ev allocator.AuditEvent) error {
	if err := tx.deleteRecord(r); err != nil {
		return err
	}
	return tx.Audit(ev)
}

// ReleaseDamaged deletes the record under ip, which does not decode, and
// every index entry pointing at it, and appends ev to the audit log.
func (tx *Tx) ReleaseDamaged(ip netip.Addr, ev allocator.AuditEvent) error {
	if err := tx.deleteDamaged(ip); err != nil {
		return err
	}
	return tx.Audit(ev)
}

// deleteDamaged removes the record under ip, which does not decode, and
// every index entry pointing at it (its owner is unknown, so the owner index
// is searched).
func (tx *Tx) deleteDamaged(ip netip.Addr) error {
	key := addrKey(ip)
	if err := tx.dropOwnerEntries(key); err != nil {
		return err
	}
	if err := tx.dropPodEntries(key); err != nil {
		return err
	}
	if err := tx.allocs.Delete(key); err != nil {
		return err
	}
	if err := tx.imported.Delete(key); err != nil {
		return err
	}
	if ip.IsValid() {
		if err := (takenBits{tx.taken}).set(ip, false); err != nil {
			return err
		}
	}
	return tx.addRecords(-1)
}

// dropOwnerEntries deletes every owner index entry for the address key (a
// walk of the index: only for records whose owner cannot be read).
func (tx *Tx) dropOwnerEntries(key []byte) error {
	var drop [][]byte
	c := tx.owners.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) == 8+len(key) && bytes.Equal(k[8:], key) {
			drop = append(drop, bytes.Clone(k))
		}
	}
	for _, k := range drop {
		if err := tx.owners.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteRecord removes r, read from this transaction, and its index
// entries, without reading and decoding it again.
func (tx *Tx) deleteRecord(r *allocator.Record) error {
	key := addrKey(r.IP)
	if err := tx.owners.Delete(append(ownerPrefix(r.Attachment()), key...)); err != nil {
		return err
	}
	if err := tx.dropPodEntry(r, ""); err != nil {
		return err
	}
	if err := tx.allocs.Delete(key); err != nil {
		return err
	}
	// Deleting a key that is not there touches no page.
	if err := tx.imported.Delete(key); err != nil {
		return err
	}
	if err := (takenBits{tx.taken}).set(r.IP, false); err != nil {
		return err
	}
	return tx.addRecords(-1)
}

// recordCount is the records count kept in meta, or false when it is absent
// or damaged (the next read-write open restores it from the records).
func (tx *Tx) recordCount() (int, bool) {
	if tx.meta == nil {
		return 0, false
	}
	v := tx.meta.Get(keyRecords)
	if len(v) != 8 {
		return 0, false
	}
	return int(binary.BigEndian.Uint64(v)), true
}

// addRecords moves the records count by d. An absent count stays absent
// (the next read-write open restores it from the records).
func (tx *Tx) addRecords(d int) error {
	n, ok := tx.recordCount()
	if !ok {
		return nil
	}
	return tx.setRecordCount(max(n+d, 0))
}

func (tx *Tx) setRecordCount(n int) error {
	return tx.meta.Put(keyRecords, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// ForEach calls fn for every record that decodes, in address order; records
// that do not are skipped and noted (DamagedSeen, or DamagedRecords for all
// of them). fn must not write.
func (tx *Tx) ForEach(fn func(*allocator.Record) error) error {
	return tx.allocs.ForEach(func(k, v []byte) error {
		r, err := decodeAt(k, v)
		if err != nil {
			tx.noteDamaged(newDamaged(k, v, err))
			return nil
		}
		return fn(r)
	})
}
