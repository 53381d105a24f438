package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestAllocateRoundRobinAndRecords(t *testing.T) {
	s := newStore(t)
	sets := []StoredRangeSet{set4}
	for i, want := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"} {
		eq(t, fmt.Sprint("ADD c", i), mustGet(t, s, sets, fmt.Sprint("c", i)), []string{want})
	}
	wantErr(t, alloc(t, s, sets, "c5", "eth0"), ErrRangeExhausted,
		"failed to allocate for range 0: no IP addresses available in range set: 10.0.0.1-10.0.0.6")
	// A released address is not reused before the round comes back to it.
	eq(t, "DEL c2", release(t, s, "c2", "eth0"), []string{"10.0.0.4"})
	eq(t, "DEL c0", release(t, s, "c0", "eth0"), []string{"10.0.0.2"})
	eq(t, "ADD after wrap", mustGet(t, s, sets, "c6"), []string{"10.0.0.2"})
	eq(t, "ADD continues after last", mustGet(t, s, sets, "c7"), []string{"10.0.0.4"})
	eq(t, "last reserved", lastReserved(t, s, 0), "10.0.0.4")

	r := alloc(t, s, []StoredRangeSet{set4, set6}, "d1", "net1")
	wantErr(t, r, ErrRangeExhausted, "failed to allocate for range 0: no IP addresses available in range set: 10.0.0.1-10.0.0.6")

	// The record carries what an operator needs.
	s2 := newStore(t)
	r = alloc(t, s2, []StoredRangeSet{set4, set6}, "abc", "eth1")
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := []Record{
		{IP: netip.MustParseAddr("10.0.0.2"), PrefixLen: 29, Gateway: netip.MustParseAddr("10.0.0.1"), RangeSet: 0},
		{IP: netip.MustParseAddr("fd00::2"), PrefixLen: 125, Gateway: netip.MustParseAddr("fd00::1"), RangeSet: 1},
	}
	for i, w := range want {
		w.ContainerID, w.IfName, w.Network = "abc", "eth1", "net1"
		w.PodNamespace, w.PodName, w.PodUID, w.Netns = "ns", "pod-abc", "uid-abc", "/var/run/netns/abc"
		w.State, w.Source, w.Created = StatePending, "add", testTime
		view(t, s2, func(tx Store) error {
			got, d := tx.Lookup(w.IP)
			if got == nil {
				t.Fatalf("stored record %s: %v %v", w.IP, got, d)
			}
			eq(t, fmt.Sprint("stored record ", i), *got, w)
			eq(t, fmt.Sprint("returned record ", i), *r.recs[i], w)
			return nil
		})
	}
	view(t, s2, func(tx Store) error {
		got, _ := tx.RangeSets()
		eq(t, "stored range sets", got, []StoredRangeSet{set4, set6})
		eq(t, "stored network", tx.(*memStore).network, "net1")
		return nil
	})
}

func TestAllocateRequested(t *testing.T) {
	dual := []StoredRangeSet{set4, set6}
	tests := []struct {
		name      string
		sets      []StoredRangeSet
		before    [][]string // earlier ADDs: id, requested...
		id        string
		requested []string
		want      []string
		code      uint
		msg       string
		wantLast  string // range set 0's last reserved afterwards
	}{
		{name: "free address", sets: dual, id: "c1", requested: []string{"10.0.0.5"}, want: []string{"10.0.0.5", "fd00::2"}, wantLast: "10.0.0.5"},
		{name: "one per family", sets: dual, id: "c1", requested: []string{"fd00::7", "10.0.0.3"}, want: []string{"10.0.0.3", "fd00::7"}, wantLast: "10.0.0.3"},
		{name: "request moves the round-robin point", sets: dual, before: [][]string{{"a", "10.0.0.5"}}, id: "c1", want: []string{"10.0.0.6", "fd00::3"}, wantLast: "10.0.0.6"},
		{name: "the gateway", sets: dual, id: "c1", requested: []string{"10.0.0.1"},
			code: ErrAddressUnavailable, msg: "failed to allocate for range 0: requested ip 10.0.0.1 is subnet's gateway"},
		{name: "the v6 gateway", sets: dual, id: "c1", requested: []string{"fd00::1"},
			code: ErrAddressUnavailable, msg: "failed to allocate for range 1: requested ip fd00::1 is subnet's gateway", wantLast: "10.0.0.2"},
		{name: "taken", sets: dual, before: [][]string{{"a"}}, id: "c1", requested: []string{"10.0.0.2"},
			code: ErrAddressUnavailable, msg: "failed to allocate for range 0: requested IP address 10.0.0.2 is not available in range set 10.0.0.1-10.0.0.6", wantLast: "10.0.0.2"},
		{name: "outside every range set", sets: dual, id: "c1", requested: []string{"192.168.0.9"},
			code: ErrAddressUnavailable, msg: "failed to allocate all requested IPs: 192.168.0.9", wantLast: "10.0.0.2"},
		{name: "in the subnet but past rangeEnd", sets: dual, id: "c1", requested: []string{"10.0.0.7"},
			code: ErrAddressUnavailable, msg: "failed to allocate all requested IPs: 10.0.0.7", wantLast: "10.0.0.2"},
		{name: "two in one family: the second is left over", sets: []StoredRangeSet{set4}, id: "c1", requested: []string{"10.0.0.4", "10.0.0.5"},
			code: ErrAddressUnavailable, msg: "failed to allocate all requested IPs: 10.0.0.5", wantLast: "10.0.0.4"},
		// host-local keeps requested IPs in a map: the same address asked for
		// twice (CNI_ARGS IP= and runtimeConfig.ips) is one request.
		{name: "the same address twice", sets: dual, id: "c1", requested: []string{"10.0.0.4", "10.0.0.4"}, want: []string{"10.0.0.4", "fd00::2"}, wantLast: "10.0.0.4"},
		// host-local checks duplicates only when choosing an address itself.
		{name: "requested by an attachment that already holds one", sets: []StoredRangeSet{set4}, before: [][]string{{"c1"}}, id: "c1", requested: []string{"10.0.0.6"}, want: []string{"10.0.0.6"}, wantLast: "10.0.0.6"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			var kept []string
			for _, b := range tc.before {
				kept = append(kept, mustGet(t, s, tc.sets, b[0], b[1:]...)...)
			}
			r := alloc(t, s, tc.sets, tc.id, "eth0", tc.requested...)
			if tc.msg != "" {
				wantErr(t, r, tc.code, tc.msg)
			} else if r.err != nil {
				t.Fatalf("ADD: %v", r.err)
			} else {
				eq(t, "addresses", r.ips(), tc.want)
			}
			var all []string
			view(t, s, func(tx Store) error {
				return forEach(tx, func(r *Record) error { all = append(all, r.IP.String()); return nil })
			})
			wantAll := slices.Concat(kept, tc.want)
			slices.SortFunc(wantAll, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
			if len(wantAll) == 0 {
				wantAll = nil
			}
			eq(t, "reserved afterwards", all, wantAll)
			eq(t, "last reserved", lastReserved(t, s, 0), tc.wantLast)
		})
	}
}

func TestAllocateDuplicate(t *testing.T) {
	s := newStore(t)
	sets := []StoredRangeSet{set4, set6}
	eq(t, "ADD", mustGet(t, s, sets, "c1"), []string{"10.0.0.2", "fd00::2"})
	wantErr(t, alloc(t, s, sets, "c1", "eth0"), ErrAddressUnavailable,
		"failed to allocate for range 0: 10.0.0.2 has been allocated to c1, duplicate allocation is not allowed")
	eq(t, "the failed duplicate leaves the first allocation", held(t, s, "c1", "eth0"), []string{"10.0.0.2", "fd00::2"})
	// Another interface of the same container is another attachment.
	if r := alloc(t, s, sets, "c1", "net1"); r.err != nil {
		t.Fatalf("ADD c1/net1: %v", r.err)
	}
	// A record from a host-local version that stored the container ID alone
	// counts for every interface.
	update(t, s, func(tx Store) error { return tx.Put(rec("10.0.0.6", "old", "")) })
	wantErr(t, alloc(t, s, sets, "old", "eth0"), ErrAddressUnavailable,
		"failed to allocate for range 0: 10.0.0.6 has been allocated to old, duplicate allocation is not allowed")

	// Holding two addresses of the range set (the second one requested),
	// host-local names the first its directory walk meets: "10.0.1.10"
	// sorts before "10.0.1.2".
	s28 := []StoredRangeSet{set(rng("10.0.1.0/28", "10.0.1.1", "10.0.1.14", "10.0.1.1"))}
	s3 := newStore(t)
	eq(t, "ADD", mustGet(t, s3, s28, "c1"), []string{"10.0.1.2"})
	eq(t, "ADD requested", mustGet(t, s3, s28, "c1", "10.0.1.10"), []string{"10.0.1.10"})
	wantErr(t, alloc(t, s3, s28, "c1", "eth0"), ErrAddressUnavailable,
		"failed to allocate for range 0: 10.0.1.10 has been allocated to c1, duplicate allocation is not allowed")
}

// host-local looks for duplicates among the attachment's records and the
// container's ID-only records together.
func TestAllocateDuplicateMixedLegacy(t *testing.T) {
	s := newStore(t)
	sets := []StoredRangeSet{set4, set6}
	update(t, s, func(tx Store) error {
		if err := tx.Put(rec("10.0.0.5", "c1", "")); err != nil { // ID-only, range set 0
			return err
		}
		return tx.Put(rec("fd00::5", "c1", "eth0")) // range set 1
	})
	wantErr(t, alloc(t, s, sets, "c1", "eth0"), ErrAddressUnavailable,
		"failed to allocate for range 0: 10.0.0.5 has been allocated to c1, duplicate allocation is not allowed")
	var n int
	view(t, s, func(tx Store) error { n = tx.(*memStore).count(); return nil })
	if n != 2 || len(held(t, s, "c1", "eth0")) != 1 {
		t.Errorf("the refused ADD changed the container's reservations: %d records, held %v", n, held(t, s, "c1", "eth0"))
	}
}

// fillV6 reserves all of set6 for other containers, without moving any
// round-robin point.
func fillV6(t *testing.T, s *memStore) {
	t.Helper()
	update(t, s, func(tx Store) error {
		for i, ip := range span("fd00::2", "fd00::7") {
			if err := tx.Put(rec(ip.String(), fmt.Sprint("v6-", i), "eth0")); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestAllocateDualStackPartialFailure(t *testing.T) {
	s := newStore(t)
	sets := []StoredRangeSet{set4, set6}
	fillV6(t, s)
	eq(t, "v4 last reserved before", lastReserved(t, s, 0), "")
	wantErr(t, alloc(t, s, sets, "c1", "eth0"), ErrRangeExhausted,
		"failed to allocate for range 1: no IP addresses available in range set: fd00::1-fd00::7")
	eq(t, "c1 holds nothing", held(t, s, "c1", "eth0"), []string{})
	view(t, s, func(tx Store) error {
		if free, _ := tx.Free(netip.MustParseAddr("10.0.0.2"), time.Time{}); !free {
			t.Error("the v4 address reserved before the failure was not released")
		}
		ex := tx.(*memStore).exhaustion
		eq(t, "exhaustions", ex, map[int]Exhaustion{1: {Count: 1, Last: testTime, RangeSet: "fd00::1-fd00::7"}})
		return nil
	})
	// host-local keeps the moved round-robin point: the next pod gets .3, not .2.
	eq(t, "v4 last reserved after", lastReserved(t, s, 0), "10.0.0.2")
	eq(t, "next v4 ADD", mustGet(t, s, []StoredRangeSet{set4}, "c2"), []string{"10.0.0.3"})

	// Each failing ADD is counted.
	alloc(t, s, sets, "c3", "eth0")
	view(t, s, func(tx Store) error {
		ex := tx.(*memStore).exhaustion
		if ex[1].Count != 2 {
			t.Errorf("exhaustion count = %d, want 2", ex[1].Count)
		}
		return nil
	})

	// Undoing releases everything the attachment holds, as host-local's
	// ReleaseByID does, including an address it held before this ADD.
	s2 := newStore(t)
	mustGet(t, s2, []StoredRangeSet{set4}, "c1")
	fillV6(t, s2)
	wantErr(t, alloc(t, s2, sets, "c1", "eth0", "10.0.0.5"), ErrRangeExhausted,
		"failed to allocate for range 1: no IP addresses available in range set: fd00::1-fd00::7")
	eq(t, "c1 after the failed ADD", held(t, s2, "c1", "eth0"), []string{})
	eq(t, "last reserved moved to the request", lastReserved(t, s2, 0), "10.0.0.5")
}
