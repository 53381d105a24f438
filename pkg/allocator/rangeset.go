package allocator

import (
	"net/netip"
	"strings"
)

// StoredRangeSet is a range set as the plugin last configured it, so that the
// daemon and CLI can size pools without reading CNI configs.
type StoredRangeSet struct {
	Ranges []StoredRange `json:"ranges"`
}

// StoredRange is one canonical range: every address from Start to End
// inclusive except Gateway is allocatable.
type StoredRange struct {
	Subnet  netip.Prefix `json:"subnet"`
	Start   netip.Addr   `json:"start"`
	End     netip.Addr   `json:"end"`
	Gateway netip.Addr   `json:"gateway,omitzero"`
}

// Contains reports whether ip is allocatable territory of r (gateway included).
func (r StoredRange) Contains(ip netip.Addr) bool {
	return ip.BitLen() == r.Start.BitLen() && r.Start.Compare(ip) <= 0 && ip.Compare(r.End) <= 0
}

// rangeFor returns the index of the range of set holding ip, or -1.
func rangeFor(set StoredRangeSet, ip netip.Addr) int {
	for i, r := range set.Ranges {
		if r.Contains(ip) {
			return i
		}
	}
	return -1
}

// String prints a range set as host-local does in its errors:
// "start-end" per range, comma-separated.
func (set StoredRangeSet) String() string {
	parts := make([]string, len(set.Ranges))
	for i, r := range set.Ranges {
		parts[i] = r.Start.String() + "-" + r.End.String()
	}
	return strings.Join(parts, ",")
}
