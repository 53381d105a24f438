package store

// The pod index (poduid): a pod's records without reading the others, for
// ADD's release of the pod's dead sandboxes (the plugin's release of a replaced sandbox).
//
// It is derived like the owner index (integrity.go) but only ever used to
// free: an entry it lacks costs a release the plugin does not make (the
// daemon's rules still apply), never an address handed out twice; an entry
// it has in excess is told apart by reading the record it points at. A
// released record's entry is deleted later, with others (dropPodEntry): the
// index holds exactly the records' entries and the queued ones.

import (
	"bytes"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// putPodEntry indexes r (stored under key) by its pod UID, if it has one.
// An entry whose delete was deferred (podDrops) and that r calls for again
// leaves the queue, so that no flush deletes it.
func (tx *Tx) putPodEntry(r *allocator.Record, key []byte) error {
	if r.PodUID == "" || tx.pods == nil {
		return nil
	}
	k := append(podPrefix(r.PodUID), key...)
	if err := tx.podDrops().remove(k); err != nil {
		return err
	}
	return tx.pods.Put(k, nil)
}

// dropPodEntry deletes prev's pod index entry unless the record replacing it
// has the same UID (keep). The delete is deferred: the entry's key joins
// poddrop, an inlineQueue, and the queued entries are deleted together when
// the queue is full (deleting the entry at once dirtied a leaf, a branch and
// the root of the pod index; docs/benchmarks.md, "DEL's pages"). Until then
// the entry is in excess, which Records tells apart by reading its record,
// and which the index verifier counts as pending, not stray (derivedIndex).
func (tx *Tx) dropPodEntry(prev *allocator.Record, keep string) error {
	if prev.PodUID == "" || prev.PodUID == keep || tx.pods == nil {
		return nil
	}
	k := append(podPrefix(prev.PodUID), addrKey(prev.IP)...)
	q := tx.podDrops()
	if ok, err := q.add(k, podDropMark); ok || err != nil {
		return err
	}
	return tx.flushPodDrops(q, k)
}

// podDropMark is a queued key's value (not empty: bbolt returns nil for an
// empty value put in the same transaction, which would read as absent).
var podDropMark = []byte{1}

// flushPodDrops deletes the queued pod index entries, and extra's, and
// empties the queue.
func (tx *Tx) flushPodDrops(q inlineQueue, extra []byte) error {
	drop, err := q.drain()
	if err != nil {
		return err
	}
	for _, k := range append([]queued{{k: extra}}, drop...) {
		if err := tx.pods.Delete(k.k); err != nil {
			return err
		}
	}
	return nil
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
