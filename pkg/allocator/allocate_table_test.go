package allocator

import (
	"net/netip"
	"testing"
)

// TestAllocateTable states the address choice case by case, the way
// host-local's allocator tests do: a store holding some records (owner
// "other" unless named), a round-robin point, a request, and what ADD must
// answer.
func TestAllocateTable(t *testing.T) {
	two := set(rng("10.0.0.0/29", "10.0.0.2", "10.0.0.3", "10.0.0.1"), rng("10.0.1.0/29", "10.0.1.2", "10.0.1.3", "10.0.1.1"))
	cases := []struct {
		name      string
		sets      []StoredRangeSet
		held      map[string]string // address -> container ID ("c" is the caller)
		last      string            // range set 0's last reserved address
		requested []string
		want      []string
		code      uint // error code instead of want
		msg       string
	}{
		{name: "empty pool: the first address after the gateway", sets: []StoredRangeSet{set4}, want: []string{"10.0.0.2"}},
		{name: "after the last reserved", sets: []StoredRangeSet{set4}, last: "10.0.0.3", want: []string{"10.0.0.4"}},
		{name: "skips reserved addresses", sets: []StoredRangeSet{set4}, last: "10.0.0.2",
			held: map[string]string{"10.0.0.3": "x", "10.0.0.4": "y"}, want: []string{"10.0.0.5"}},
		{name: "wraps at the range's end", sets: []StoredRangeSet{set4}, last: "10.0.0.6", want: []string{"10.0.0.2"}},
		{name: "wraps past reserved addresses to the last reserved itself", sets: []StoredRangeSet{set4}, last: "10.0.0.4",
			held: map[string]string{"10.0.0.5": "x", "10.0.0.6": "x", "10.0.0.2": "x", "10.0.0.3": "x"}, want: []string{"10.0.0.4"}},
		{name: "a last reserved outside the ranges starts over", sets: []StoredRangeSet{set4}, last: "192.168.0.9", want: []string{"10.0.0.2"}},
		{name: "next range of the set after the first is full", sets: []StoredRangeSet{two},
			held: map[string]string{"10.0.0.2": "x", "10.0.0.3": "x"}, want: []string{"10.0.1.2"}},
		{name: "continues in the range holding the last reserved", sets: []StoredRangeSet{two}, last: "10.0.1.2", want: []string{"10.0.1.3"}},
		{name: "full", sets: []StoredRangeSet{set(rng("10.0.0.0/30", "10.0.0.2", "10.0.0.2", "10.0.0.1"))},
			held: map[string]string{"10.0.0.2": "x"}, code: ErrRangeExhausted,
			msg: "failed to allocate for range 0: no IP addresses available in range set: 10.0.0.2-10.0.0.2"},
		{name: "one address per range set", sets: []StoredRangeSet{set4, set6}, want: []string{"10.0.0.2", "fd00::2"}},
		{name: "requested", sets: []StoredRangeSet{set4}, requested: []string{"10.0.0.5"}, want: []string{"10.0.0.5"}},
		{name: "requested twice is one request", sets: []StoredRangeSet{set4}, requested: []string{"10.0.0.5", "10.0.0.5"}, want: []string{"10.0.0.5"}},
		{name: "requested in one range set, chosen in the other", sets: []StoredRangeSet{set4, set6}, requested: []string{"fd00::7"},
			want: []string{"10.0.0.2", "fd00::7"}},
		{name: "requested but held", sets: []StoredRangeSet{set4}, requested: []string{"10.0.0.5"}, held: map[string]string{"10.0.0.5": "x"},
			code: ErrAddressUnavailable, msg: "failed to allocate for range 0: requested IP address 10.0.0.5 is not available in range set 10.0.0.1-10.0.0.6"},
		{name: "requested gateway", sets: []StoredRangeSet{set(rng("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.3"))}, requested: []string{"10.0.0.3"},
			code: ErrAddressUnavailable, msg: "failed to allocate for range 0: requested ip 10.0.0.3 is subnet's gateway"},
		{name: "requested outside every range set", sets: []StoredRangeSet{set4}, requested: []string{"10.9.0.1"},
			code: ErrAddressUnavailable, msg: "failed to allocate all requested IPs: 10.9.0.1"},
		{name: "the attachment already holds one in the range set", sets: []StoredRangeSet{set4}, held: map[string]string{"10.0.0.4": "c"},
			code: ErrAddressUnavailable, msg: "failed to allocate for range 0: 10.0.0.4 has been allocated to c, duplicate allocation is not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			update(t, s, func(tx Store) error {
				for ip, id := range tc.held {
					if err := tx.Put(rec(ip, id, "eth0")); err != nil {
						return err
					}
				}
				if tc.last != "" {
					return tx.SetLastReserved(0, netip.MustParseAddr(tc.last))
				}
				return nil
			})
			before := s.count()
			r := alloc(t, s, tc.sets, "c", "eth0", tc.requested...)
			if tc.code != 0 {
				wantErr(t, r, tc.code, tc.msg)
				eq(t, "records after a refused ADD", s.count(), before)
				return
			}
			if r.err != nil {
				t.Fatalf("ADD: %v, want %v", r.err, tc.want)
			}
			eq(t, "addresses", r.ips(), tc.want)
			eq(t, "held afterwards", held(t, s, "c", "eth0"), tc.want)
		})
	}
}
