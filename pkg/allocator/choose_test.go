package allocator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// sliceIter is a TakenIter over a sorted slice. netip.Addr.Compare orders
// IPv4 before IPv6, as the store's keys do.
type sliceIter struct {
	addrs []netip.Addr
	i     int
}

func newSliceIter(taken []netip.Addr) *sliceIter {
	s := slices.Clone(taken)
	slices.SortFunc(s, netip.Addr.Compare)
	return &sliceIter{addrs: slices.Compact(s)}
}

func (s *sliceIter) at() (netip.Addr, bool) {
	if s.i < len(s.addrs) {
		return s.addrs[s.i], true
	}
	return netip.Addr{}, false
}

func (s *sliceIter) Seek(from netip.Addr) (netip.Addr, bool) {
	s.i, _ = slices.BinarySearchFunc(s.addrs, from, netip.Addr.Compare)
	return s.at()
}

func (s *sliceIter) Next() (netip.Addr, bool) {
	s.i++
	return s.at()
}

// modelNextFree is host-local's choice transcribed literally: GetIter, then
// RangeIter.Next until the store accepts a reservation. It steps one address
// at a time, unlike NextFree, which jumps over reserved runs.
func modelNextFree(set StoredRangeSet, last netip.Addr, hasLast bool, taken map[netip.Addr]bool) (netip.Addr, int, bool) {
	rs := set.Ranges
	idx := 0
	var cur, startIP netip.Addr // invalid = host-local's nil
	inSet := false
	if hasLast {
		for i, r := range rs {
			if last.BitLen() == r.Start.BitLen() && r.Start.Compare(last) <= 0 && last.Compare(r.End) <= 0 {
				idx, cur, inSet = i, last, true
				break
			}
		}
	}
	if !inSet {
		startIP = rs[0].Start
	}
	for {
		r := rs[idx]
		var cand netip.Addr
		if !cur.IsValid() {
			cur, startIP = r.Start, r.Start
			cand = cur
		} else {
			if cur == r.End {
				idx = (idx + 1) % len(rs)
				r = rs[idx]
				cur = r.Start
			} else {
				cur = cur.Next()
			}
			if !startIP.IsValid() {
				startIP = cur
			} else if cur == startIP {
				return netip.Addr{}, -1, false
			}
			cand = cur
		}
		if cand == r.Gateway {
			continue
		}
		if !taken[cand] {
			return cand, idx, true
		}
	}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// span lists every address from a to b inclusive.
func span(a, b string) []netip.Addr {
	var out []netip.Addr
	for ip := netip.MustParseAddr(a); ip.Compare(netip.MustParseAddr(b)) <= 0; ip = ip.Next() {
		out = append(out, ip)
	}
	return out
}

func TestNextFreeTable(t *testing.T) {
	def := set(rng("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.1")) // host-local defaults for a /29
	two := set(rng("10.0.0.0/29", "10.0.0.2", "10.0.0.4", "10.0.0.1"),
		rng("10.0.1.0/29", "10.0.1.1", "10.0.1.3", "10.0.1.2"))
	three := set(rng("10.0.0.0/28", "10.0.0.2", "10.0.0.3", ""),
		rng("10.0.1.0/28", "10.0.1.2", "10.0.1.3", "10.0.1.1"),
		rng("10.0.2.0/28", "10.0.2.2", "10.0.2.3", "10.0.2.3"))
	v6 := set(rng("fd00::/125", "fd00::1", "fd00::7", "fd00::1"))
	tests := []struct {
		name   string
		set    StoredRangeSet
		last   string // "" = none
		taken  []netip.Addr
		want   string // "" = exhausted
		wantRI int
	}{
		{"no last, gateway at rangeStart is skipped", def, "", nil, "10.0.0.2", 0},
		{"continues after last", def, "10.0.0.3", nil, "10.0.0.4", 0},
		{"skips reserved addresses", def, "10.0.0.3", addrs("10.0.0.4", "10.0.0.5"), "10.0.0.6", 0},
		{"last == rangeEnd wraps to rangeStart, skipping the gateway", def, "10.0.0.6", nil, "10.0.0.2", 0},
		{"wraps past the end to a freed address", def, "10.0.0.4", addrs("10.0.0.2", "10.0.0.5", "10.0.0.6"), "10.0.0.3", 0},
		{"last itself is visited last", def, "10.0.0.4", addrs("10.0.0.2", "10.0.0.3", "10.0.0.5", "10.0.0.6"), "10.0.0.4", 0},
		{"last at the gateway continues after it", def, "10.0.0.1", nil, "10.0.0.2", 0},
		{"last outside the set starts at rangeStart", def, "10.0.0.7", nil, "10.0.0.2", 0},
		{"last in another subnet starts at rangeStart", def, "192.168.0.3", addrs("10.0.0.2"), "10.0.0.3", 0},
		{"last of the other family starts at rangeStart", def, "fd00::3", nil, "10.0.0.2", 0},
		{"full set", def, "10.0.0.3", span("10.0.0.2", "10.0.0.6"), "", -1},
		{"full set without last", def, "", span("10.0.0.1", "10.0.0.6"), "", -1},
		{"reservations outside the range do not matter", def, "", addrs("10.0.0.0", "10.0.0.7", "10.0.1.2", "fd00::2"), "10.0.0.2", 0},
		{"reserved gateway does not hide the next address", def, "", addrs("10.0.0.1"), "10.0.0.2", 0},

		{"multiple ranges: rangeEnd moves to the next range", two, "10.0.0.4", nil, "10.0.1.1", 1},
		{"multiple ranges: skips the second range's gateway", two, "10.0.1.1", nil, "10.0.1.3", 1},
		{"multiple ranges: wraps from the last range to the first", two, "10.0.1.3", nil, "10.0.0.2", 0},
		{"multiple ranges: full second range", two, "10.0.0.4", addrs("10.0.1.1", "10.0.1.3"), "10.0.0.2", 0},
		{"multiple ranges: only last's predecessor free", two, "10.0.0.3", addrs("10.0.0.4", "10.0.1.1", "10.0.1.3", "10.0.0.2"), "10.0.0.3", 0},
		{"multiple ranges: full", two, "10.0.0.3", addrs("10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.1.1", "10.0.1.3"), "", -1},
		{"multiple ranges: gateway outside its range does not matter", three, "", addrs("10.0.0.2", "10.0.0.3"), "10.0.1.2", 1},
		{"multiple ranges: gateway at rangeEnd", three, "10.0.1.3", addrs("10.0.2.2"), "10.0.0.2", 0},
		{"multiple ranges: last in the middle range", three, "10.0.1.2", nil, "10.0.1.3", 1},
		{"multiple ranges: last between ranges is not in the set", three, "10.0.1.9", nil, "10.0.0.2", 0},

		{"v6: gateway at rangeStart", v6, "", nil, "fd00::2", 0},
		{"v6: last == rangeEnd (the subnet's last address) wraps", v6, "fd00::7", addrs("fd00::2"), "fd00::3", 0},
		{"v6: v4 reservations do not collide", v6, "fd00::3", addrs("10.0.0.4"), "fd00::4", 0},
		{"v6: full", v6, "fd00::3", span("fd00::2", "fd00::7"), "", -1},
		{"single address range that is the gateway", set(rng("10.0.0.0/29", "10.0.0.1", "10.0.0.1", "10.0.0.1")), "", nil, "", -1},
		{"top of the address space", set(rng("255.255.255.248/29", "255.255.255.254", "255.255.255.255", "255.255.255.249")), "255.255.255.255", addrs("255.255.255.254"), "255.255.255.255", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var last netip.Addr
			if tc.last != "" {
				last = netip.MustParseAddr(tc.last)
			}
			takenMap := map[netip.Addr]bool{}
			for _, a := range tc.taken {
				takenMap[a] = true
			}
			got, ri, ok := NextFree(tc.set, last, tc.last != "", newSliceIter(tc.taken))
			mGot, mRI, mOK := modelNextFree(tc.set, last, tc.last != "", takenMap)
			if tc.want == "" {
				if ok || mOK {
					t.Fatalf("NextFree = %v (range %d, ok %v), model = %v (ok %v); want exhausted", got, ri, ok, mGot, mOK)
				}
				return
			}
			want := netip.MustParseAddr(tc.want)
			if !ok || got != want || ri != tc.wantRI {
				t.Errorf("NextFree = %v (range %d, ok %v), want %v (range %d)", got, ri, ok, want, tc.wantRI)
			}
			if !mOK || mGot != want || mRI != tc.wantRI {
				t.Errorf("model = %v (range %d, ok %v), want %v: the table disagrees with host-local's iterator", mGot, mRI, mOK, want)
			}
		})
	}
}

// randomRangeSet builds 1-3 non-overlapping ranges of one family, each in its
// own small subnet, with gateways inside, outside or at the edge of the range.
func randomRangeSet(r *rand.Rand) StoredRangeSet {
	v6 := r.IntN(3) == 0
	n := 1 + r.IntN(3)
	var s StoredRangeSet
	for i := range n {
		var base netip.Addr
		if v6 {
			base = netip.MustParseAddr(fmt.Sprintf("fd00:%x::", 10+i))
		} else {
			base = netip.MustParseAddr(fmt.Sprintf("10.0.%d.0", 10+i))
		}
		sub := netip.PrefixFrom(base, base.BitLen()-4) // 16 addresses
		start := 1 + r.IntN(10)
		end := start + r.IntN(14-start+1)
		at := func(k int) netip.Addr {
			a := base
			for range k {
				a = a.Next()
			}
			return a
		}
		var gw netip.Addr
		switch r.IntN(5) {
		case 0:
			gw = at(start)
		case 1:
			gw = at(end)
		case 2:
			gw = at(1 + r.IntN(14))
		case 3:
			gw = at(start + r.IntN(end-start+1))
		}
		s.Ranges = append(s.Ranges, StoredRange{Subnet: sub, Start: at(start), End: at(end), Gateway: gw})
	}
	r.Shuffle(len(s.Ranges), func(i, j int) { s.Ranges[i], s.Ranges[j] = s.Ranges[j], s.Ranges[i] })
	return s
}

// TestNextFreeMatchesHostLocalModel compares NextFree with the literal model
// of host-local's iterator on random range sets, reservations and last points.
func TestNextFreeMatchesHostLocalModel(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	const rounds = 20000
	exhausted := 0
	for round := range rounds {
		s := randomRangeSet(r)
		// Candidates: every address of every subnet, plus one of the other family.
		var universe []netip.Addr
		for _, rg := range s.Ranges {
			for a := rg.Subnet.Addr(); rg.Subnet.Contains(a); a = a.Next() {
				universe = append(universe, a)
			}
		}
		if s.Ranges[0].Start.Is4() {
			universe = append(universe, netip.MustParseAddr("fd00:a::5"))
		} else {
			universe = append(universe, netip.MustParseAddr("10.0.10.5"))
		}
		density := r.Float64()
		if r.IntN(10) == 0 {
			density = 1 // often enough to see full sets
		}
		var taken []netip.Addr
		takenMap := map[netip.Addr]bool{}
		for _, a := range universe {
			if r.Float64() < density {
				taken = append(taken, a)
				takenMap[a] = true
			}
		}
		var last netip.Addr
		hasLast := r.IntN(6) != 0
		if hasLast {
			last = universe[r.IntN(len(universe))]
		}
		got, ri, ok := NextFree(s, last, hasLast, newSliceIter(taken))
		want, wri, wok := modelNextFree(s, last, hasLast, takenMap)
		if got != want || ri != wri || ok != wok {
			t.Fatalf("seed %d round %d: set %+v last %v (has %v) taken %v:\nNextFree = %v range %d ok %v\nhost-local model = %v range %d ok %v",
				seed, round, s, last, hasLast, taken, got, ri, ok, want, wri, wok)
		}
		if !ok {
			exhausted++
		}
	}
	if exhausted == 0 || exhausted == rounds {
		t.Errorf("seed %d: %d of %d rounds exhausted; the generator does not cover both outcomes", seed, exhausted, rounds)
	}
}
