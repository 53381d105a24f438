package allocator

import (
	"net/netip"
	"time"
)

// FullRangeSets returns the indexes of range sets with no free address,
// as a read-only transaction sees them (STATUS): Store.NextFree answers
// there from the taken bitmap and writes nothing.
func FullRangeSets(tx Store, sets []StoredRangeSet) []int {
	var full []int
	for i, set := range sets {
		if _, _, ok, err := tx.NextFree(set, netip.Addr{}, false, time.Time{}); err == nil && !ok {
			full = append(full, i)
		}
	}
	return full
}
