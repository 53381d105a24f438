package store

// The pod index (poduid): a pod's records without reading the others, for
// ADD's release of the pod's dead sandboxes (allocator.ReleaseReplaced).
//
// It is derived like the owner index (integrity.go) but only ever used to
// free: an entry it lacks costs a release the plugin does not make (the
// daemon's rules still apply), never an address handed out twice; an entry
// it has in excess is told apart by reading the record it points at.

import (
	"bytes"

	"github.com/hostlease/hostlease/pkg/allocator"
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
func (tx *Tx) putPodEntry(r *allocator.Record, key []byte) error {
	if r.PodUID == "" || tx.pods == nil {
		return nil
	}
	return tx.pods.Put(append(podPrefix(r.PodUID), key...), nil)
}

// dropPodEntry deletes prev's pod index entry unless the record replacing it
// has the same UID (keep).
func (tx *Tx) dropPodEntry(prev *allocator.Record, keep string) error {
	if prev.PodUID == "" || prev.PodUID == keep || tx.pods == nil {
		return nil
	}
	return tx.pods.Delete(append(podPrefix(prev.PodUID), addrKey(prev.IP)...))
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
