package store

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// RecordExhaustion counts one ADD that found range set idx full.
func (tx *Tx) RecordExhaustion(idx int, desc string, now time.Time) error {
	key := []byte(strconv.Itoa(idx))
	var e allocator.Exhaustion
	if v := tx.exhaustion.Get(key); v != nil {
		_ = json.Unmarshal(v, &e)
	}
	e.Count++
	e.Last = now
	e.RangeSet = desc
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return tx.exhaustion.Put(key, v)
}

// Exhaustions returns the exhaustion counters by range set index.
func (tx *Tx) Exhaustions() (map[int]allocator.Exhaustion, error) {
	out := map[int]allocator.Exhaustion{}
	if tx.exhaustion == nil {
		return out, nil // a read-only view of a store that lost the bucket
	}
	err := tx.exhaustion.ForEach(func(k, v []byte) error {
		idx, err := strconv.Atoi(string(k))
		if err != nil {
			return nil
		}
		var e allocator.Exhaustion
		if err := json.Unmarshal(v, &e); err != nil {
			return nil // a damaged counter is left out; the next exhaustion rewrites it
		}
		out[idx] = e
		return nil
	})
	return out, err
}
