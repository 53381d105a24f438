// Package rangetest builds canonical range sets for the tests of the
// allocator's packages (the store's, the pool's, the config loader's). The
// root package's own tests cannot import it (it imports the root package) and
// keep their own two helpers.
package rangetest

import (
	"net/netip"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Range is a canonical range as host-local's loader makes one: every
// address from start to end except gw ("" for none) is allocatable.
func Range(subnet, start, end, gw string) allocator.StoredRange {
	r := allocator.StoredRange{Subnet: netip.MustParsePrefix(subnet), Start: netip.MustParseAddr(start), End: netip.MustParseAddr(end)}
	if gw != "" {
		r.Gateway = netip.MustParseAddr(gw)
	}
	return r
}

// Set is a range set of the given ranges.
func Set(ranges ...allocator.StoredRange) allocator.StoredRangeSet {
	return allocator.StoredRangeSet{Ranges: ranges}
}

// Set4 and Set6 are host-local's canonical forms of 10.0.0.0/29 and
// fd00::/125: the gateway is rangeStart, so .2-.6 and ::2-::7 are allocatable.
var (
	Set4 = Set(Range("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.1"))
	Set6 = Set(Range("fd00::/125", "fd00::1", "fd00::7", "fd00::1"))
)
