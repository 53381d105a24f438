package allocator

import "net/netip"

// TakenIter walks reserved addresses in address order. The store walks its
// taken bitmap (which also finds free addresses a word at a time: freeFinder);
// tests use a sorted slice.
type TakenIter interface {
	// Seek returns the first taken address >= from (in key order), if any.
	Seek(from netip.Addr) (netip.Addr, bool)
	// Next returns the taken address after the last one returned, if any.
	Next() (netip.Addr, bool)
}

// segment is an inclusive span of one range to search.
type segment struct {
	rangeIdx int
	from, to netip.Addr
}

// roundRobin lists the spans host-local's iterator visits, in order: from the
// address after the last reserved one to the end of its range, the following
// ranges in full (wrapping), then the start of the first range up to and
// including the last reserved address. Without a usable last reserved address
// it is every range from the first.
func roundRobin(set StoredRangeSet, last netip.Addr, hasLast bool) []segment {
	n := len(set.Ranges)
	i := -1
	if hasLast {
		i = rangeFor(set, last)
	}
	segs := make([]segment, 0, n+1)
	if i < 0 {
		for j, r := range set.Ranges {
			segs = append(segs, segment{j, r.Start, r.End})
		}
		return segs
	}
	r := set.Ranges[i]
	if last != r.End {
		segs = append(segs, segment{i, last.Next(), r.End})
	}
	for k := 1; k < n; k++ {
		j := (i + k) % n
		segs = append(segs, segment{j, set.Ranges[j].Start, set.Ranges[j].End})
	}
	return append(segs, segment{i, r.Start, last})
}

// NextFree is host-local's address choice: the first address in round-robin
// order after last that is neither reserved nor its range's gateway. It
// returns the address and the index of its range within set.
//
// Over the store's bitmap (a freeFinder) it reads whole 64-address words
// until the first clear bit; over a plain TakenIter its cost is the number of
// reserved addresses it steps over, not the pool size.
func NextFree(set StoredRangeSet, last netip.Addr, hasLast bool, taken TakenIter) (netip.Addr, int, bool) {
	for _, s := range roundRobin(set, last, hasLast) {
		if ip, ok := firstFree(taken, s.from, s.to, set.Ranges[s.rangeIdx].Gateway); ok {
			return ip, s.rangeIdx, true
		}
	}
	return netip.Addr{}, -1, false
}

// freeFinder is a TakenIter that finds the first free address itself, faster
// than stepping over taken ones (the store's bitmap; figures in
// docs/benchmarks.md).
type freeFinder interface {
	FirstFree(from, to, gw netip.Addr) (netip.Addr, bool)
}

// firstFree returns the first address in [from, to] that is neither taken nor gw.
func firstFree(taken TakenIter, from, to, gw netip.Addr) (netip.Addr, bool) {
	if f, ok := taken.(freeFinder); ok {
		return f.FirstFree(from, to, gw)
	}
	t, ok := taken.Seek(from)
	for cand := from; cand.IsValid() && cand.Compare(to) <= 0; cand = cand.Next() {
		if cand == gw {
			continue
		}
		for ok && t.Less(cand) {
			t, ok = taken.Next()
		}
		if !ok || t != cand {
			return cand, true
		}
	}
	return netip.Addr{}, false
}
