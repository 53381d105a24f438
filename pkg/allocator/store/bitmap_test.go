package store

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func TestBlockKeys(t *testing.T) {
	for _, tc := range []struct {
		ip, block string
		off       int
		next      string // "" = none (end of the family's space)
	}{
		{"10.0.0.0", "10.0.0.0", 0, "10.0.16.0"},
		{"10.0.15.255", "10.0.0.0", 4095, "10.0.16.0"},
		{"10.0.16.1", "10.0.16.0", 1, "10.0.32.0"},
		{"10.255.255.255", "10.255.240.0", 4095, "11.0.0.0"},
		{"255.255.255.255", "255.255.240.0", 4095, ""},
		{"fd00::1:2", "fd00::1:0", 2, "fd00::1:1000"},
		{"fd00::ffff", "fd00::f000", 0xfff, "fd00::1:0"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:f000", 4095, ""},
	} {
		k, off := blockOf(netip.MustParseAddr(tc.ip))
		if got := blockAddr(k, 0); got.String() != tc.block || off != tc.off {
			t.Errorf("blockOf(%s) = %s + %d, want %s + %d", tc.ip, got, off, tc.block, tc.off)
		}
		if got := blockAddr(k, off); got.String() != tc.ip {
			t.Errorf("blockAddr(blockOf(%s)) = %s", tc.ip, got)
		}
		next, ok := nextBlock(k)
		if got := ""; ok {
			got = blockAddr(next, 0).String()
			if got != tc.next {
				t.Errorf("nextBlock after %s = %s, want %q", tc.ip, got, tc.next)
			}
		} else if tc.next != "" {
			t.Errorf("nextBlock after %s: none, want %s", tc.ip, tc.next)
		}
	}
}

// TestTakenBitsMatchModel drives the store's bitmap with random reservations
// clustered around block boundaries (and the ends of both address spaces) and
// checks FirstFree, the set-bit iterator, has and count against a plain set.
func TestTakenBitsMatchModel(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	s := newStore(t)
	bases := []netip.Addr{
		netip.MustParseAddr("10.0.15.200"), netip.MustParseAddr("10.0.31.250"),
		netip.MustParseAddr("255.255.239.250"), netip.MustParseAddr("255.255.255.100"),
		netip.MustParseAddr("fd00::1:fff0"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00"),
	}
	add := func(a netip.Addr, n int) netip.Addr {
		for ; n > 0 && a.IsValid(); n-- {
			a = a.Next()
		}
		return a
	}
	errRollback := errors.New("rollback")
	for round := range 300 {
		base := bases[r.IntN(len(bases))]
		span := 1 + r.IntN(5000)
		density := r.Float64()
		model := map[netip.Addr]bool{}
		var universe []netip.Addr
		for a, i := base, 0; a.IsValid() && i < span; a, i = a.Next(), i+1 {
			universe = append(universe, a)
			if r.Float64() < density {
				model[a] = true
			}
		}
		err := s.Update(func(tx *Tx) error {
			bits := takenBits{tx.taken}
			for a := range model {
				if err := bits.set(a, true); err != nil {
					return err
				}
			}
			// Clear a few again, as DELs do.
			for a := range model {
				if r.IntN(10) == 0 {
					delete(model, a)
					if err := bits.set(a, false); err != nil {
						return err
					}
				}
			}
			if bits.count() != len(model) {
				t.Fatalf("seed %d round %d: count %d, want %d", seed, round, bits.count(), len(model))
			}
			for range 20 {
				from := universe[r.IntN(len(universe))]
				to := add(from, r.IntN(len(universe)))
				if !to.IsValid() {
					to = universe[len(universe)-1]
				}
				gw := universe[r.IntN(len(universe))]
				var want netip.Addr
				for a := from; a.IsValid() && a.Compare(to) <= 0; a = a.Next() {
					if !model[a] && a != gw {
						want = a
						break
					}
				}
				got, ok := bits.FirstFree(from, to, gw)
				if got != want || ok != want.IsValid() {
					t.Fatalf("seed %d round %d: FirstFree(%s, %s, gw %s) = %s %v, want %s", seed, round, from, to, gw, got, ok, want)
				}
				if bits.has(from) != model[from] {
					t.Fatalf("seed %d round %d: has(%s) = %v", seed, round, from, !model[from])
				}
			}
			var sorted []netip.Addr
			for a := range model {
				sorted = append(sorted, a)
			}
			slices.SortFunc(sorted, netip.Addr.Compare)
			from := universe[r.IntN(len(universe))]
			var got []netip.Addr
			it := bits.iter()
			for a, ok := it.Seek(from); ok; a, ok = it.Next() {
				got = append(got, a)
			}
			i, _ := slices.BinarySearchFunc(sorted, from, netip.Addr.Compare)
			if !slices.Equal(got, sorted[i:]) {
				t.Fatalf("seed %d round %d: iterating from %s: %d addresses, want %d", seed, round, from, len(got), len(sorted[i:]))
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
	}
}
