package allocator

import (
	"math/big"
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

// PoolUsage is the size and use of one range set, exactly: an IPv6 range's
// size exceeds every machine integer (a /64 holds 2^64 addresses) and a
// float64 cannot tell 2^64 from 2^64-1, so sizes are big integers. Only
// metrics turn them into floats, at the Prometheus edge.
type PoolUsage struct {
	RangeSet int
	Desc     string
	Size     *big.Int // allocatable addresses (gateways excluded)
	Used     int      // reserved addresses inside the range set
}

// Free is Size - Used, exactly (never negative).
func (p PoolUsage) Free() *big.Int {
	f := new(big.Int).Sub(p.Size, big.NewInt(int64(p.Used)))
	if f.Sign() < 0 {
		f.SetInt64(0)
	}
	return f
}

// Usage measures every range set. It walks the reserved addresses once.
func Usage(tx Store, sets []StoredRangeSet) []PoolUsage {
	out := make([]PoolUsage, len(sets))
	for i, set := range sets {
		u := PoolUsage{RangeSet: i, Desc: rangeSetString(set), Size: new(big.Int)}
		for _, r := range set.Ranges {
			n := new(big.Int).Sub(addrInt(r.End), addrInt(r.Start))
			n.Add(n, big.NewInt(1))
			if r.Contains(r.Gateway) {
				n.Sub(n, big.NewInt(1))
			}
			u.Size.Add(u.Size, n)
			it := tx.Reserved()
			for t, ok := it.Seek(r.Start); ok && t.Compare(r.End) <= 0 && t.BitLen() == r.Start.BitLen(); t, ok = it.Next() {
				if t != r.Gateway { // not in Size either (reserved under an older config)
					u.Used++
				}
			}
		}
		out[i] = u
	}
	return out
}

func addrInt(a netip.Addr) *big.Int {
	b := a.AsSlice()
	return new(big.Int).SetBytes(b)
}
