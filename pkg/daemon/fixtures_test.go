package daemon

import (
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// t0 is the daemon tests' epoch: records and sweeps are timed relative to it.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testRanges is one range set, 10.1.0.10-10.1.0.200 (191 addresses).
var testRanges = []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
	Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: netip.MustParseAddr("10.1.0.10"),
	End: netip.MustParseAddr("10.1.0.200"), Gateway: netip.MustParseAddr("10.1.0.1"),
}}}}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
