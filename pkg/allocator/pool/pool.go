// Package pool measures the size and use of a network's range sets, exactly
// (math/big: an IPv6 range holds more addresses than any machine integer).
// The daemon and the CLI use it; the plugin does not import it, which keeps
// math/big out of every plugin exec.
package pool

import (
	"math/big"
	"net/netip"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Usage is the size and use of one range set, exactly: an IPv6 range's
// size exceeds every machine integer (a /64 holds 2^64 addresses) and a
// float64 cannot tell 2^64 from 2^64-1, so sizes are big integers. Only
// metrics turn them into floats, at the Prometheus edge.
type Usage struct {
	RangeSet int
	Desc     string
	Size     *big.Int // allocatable addresses (gateways excluded)
	Used     int      // reserved addresses inside the range set
}

// Free is Size - Used, exactly (never negative).
func (p Usage) Free() *big.Int {
	f := new(big.Int).Sub(p.Size, big.NewInt(int64(p.Used)))
	if f.Sign() < 0 {
		f.SetInt64(0)
	}
	return f
}

// Taken is what Measure reads of a store: its taken addresses in address
// order (store.Tx).
type Taken interface {
	TakenAddrs() allocator.TakenIter
}

// Measure returns the size and use of every range set of a store. It walks the reserved
// addresses once.
func Measure(tx Taken, sets []allocator.StoredRangeSet) []Usage {
	out := make([]Usage, len(sets))
	for i, set := range sets {
		u := Usage{RangeSet: i, Desc: set.String(), Size: new(big.Int)}
		for _, r := range set.Ranges {
			n := new(big.Int).Sub(addrInt(r.End), addrInt(r.Start))
			n.Add(n, big.NewInt(1))
			if r.Contains(r.Gateway) {
				n.Sub(n, big.NewInt(1))
			}
			u.Size.Add(u.Size, n)
			it := tx.TakenAddrs()
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
