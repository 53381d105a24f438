package allocator

import (
	"net/netip"
)

// FullRangeSets returns the indexes of range sets with no free address.
func FullRangeSets(tx Store, sets []StoredRangeSet) []int {
	var full []int
	for i, set := range sets {
		if _, _, ok := NextFree(set, netip.Addr{}, false, tx.Reserved()); !ok {
			full = append(full, i)
		}
	}
	return full
}
