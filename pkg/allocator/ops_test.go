package allocator

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

var (
	// host-local's canonical forms of 10.0.0.0/29 and fd00::/125: the gateway
	// is rangeStart, so .2-.6 and ::2-::7 are allocatable.
	set4     = set(rng("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.1"))
	set6     = set(rng("fd00::/125", "fd00::1", "fd00::7", "fd00::1"))
	testTime = time.Unix(1700000000, 0).UTC()
)

type allocResult struct {
	recs []*Record
	err  *types.Error
}

// alloc runs one ADD in its own transaction, committed even on failure as
// cmd/ipam does.
func alloc(t *testing.T, s *Store, sets []StoredRangeSet, id, ifname string, requested ...string) allocResult {
	t.Helper()
	req := AllocateRequest{Network: "net1", RangeSets: sets, Now: testTime,
		Owner: Owner{ContainerID: id, IfName: ifname, Netns: "/var/run/netns/" + id, PodNamespace: "ns", PodName: "pod-" + id, PodUID: "uid-" + id}}
	for _, r := range requested {
		req.Requested = append(req.Requested, netip.MustParseAddr(r))
	}
	var res allocResult
	update(t, s, func(tx *Tx) error {
		res.recs, res.err = Allocate(tx, req)
		return nil
	})
	return res
}

func (r allocResult) ips() []string {
	return ips(r.recs)
}

// mustGet allocates and fails the test on error.
func mustGet(t *testing.T, s *Store, sets []StoredRangeSet, id string, requested ...string) []string {
	t.Helper()
	r := alloc(t, s, sets, id, "eth0", requested...)
	if r.err != nil {
		t.Fatalf("ADD %s: %v", id, r.err)
	}
	return r.ips()
}

func wantErr(t *testing.T, r allocResult, code uint, msg string) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("ADD succeeded with %v, want error %d %q", r.ips(), code, msg)
	}
	if r.err.Code != code || r.err.Msg != msg {
		t.Fatalf("ADD error = %d %q, want %d %q", r.err.Code, r.err.Msg, code, msg)
	}
}

func release(t *testing.T, s *Store, id, ifname string) []string {
	t.Helper()
	var recs []*Record
	update(t, s, func(tx *Tx) error {
		var err error
		recs, err = Release(tx, id, ifname, "DEL", "plugin", testTime)
		return err
	})
	return ips(recs)
}

func held(t *testing.T, s *Store, id, ifname string) []string {
	t.Helper()
	var recs []*Record
	view(t, s, func(tx *Tx) error {
		var err error
		recs, err = Held(tx, id, ifname)
		return err
	})
	return ips(recs)
}

func lastReserved(t *testing.T, s *Store, idx int) string {
	t.Helper()
	var out string
	view(t, s, func(tx *Tx) error {
		if ip, ok := tx.LastReserved(idx); ok {
			out = ip.String()
		}
		return nil
	})
	return out
}

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
		w.Version, w.ContainerID, w.IfName, w.Network = SchemaVersion, "abc", "eth1", "net1"
		w.PodNamespace, w.PodName, w.PodUID, w.Netns = "ns", "pod-abc", "uid-abc", "/var/run/netns/abc"
		w.State, w.Source, w.Created = StatePending, "add", testTime
		view(t, s2, func(tx *Tx) error {
			got, err := tx.Get(w.IP)
			if err != nil || got == nil {
				t.Fatalf("stored record %s: %v %v", w.IP, got, err)
			}
			eq(t, fmt.Sprint("stored record ", i), *got, w)
			eq(t, fmt.Sprint("returned record ", i), *r.recs[i], w)
			return nil
		})
	}
	view(t, s2, func(tx *Tx) error {
		got, _ := tx.RangeSets()
		eq(t, "stored range sets", got, []StoredRangeSet{set4, set6})
		eq(t, "stored network", tx.Network(), "net1")
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
			view(t, s, func(tx *Tx) error {
				return tx.ForEach(func(r *Record) error { all = append(all, r.IP.String()); return nil })
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
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.6", "old", "")) })
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
	update(t, s, func(tx *Tx) error {
		if err := tx.Put(rec("10.0.0.5", "c1", "")); err != nil { // ID-only, range set 0
			return err
		}
		return tx.Put(rec("fd00::5", "c1", "eth0")) // range set 1
	})
	wantErr(t, alloc(t, s, sets, "c1", "eth0"), ErrAddressUnavailable,
		"failed to allocate for range 0: 10.0.0.5 has been allocated to c1, duplicate allocation is not allowed")
	var n int
	view(t, s, func(tx *Tx) error { n = tx.Count(); return nil })
	if n != 2 || len(held(t, s, "c1", "eth0")) != 1 {
		t.Errorf("the refused ADD changed the container's reservations: %d records, held %v", n, held(t, s, "c1", "eth0"))
	}
}

// fillV6 reserves all of set6 for other containers, without moving any
// round-robin point.
func fillV6(t *testing.T, s *Store) {
	t.Helper()
	update(t, s, func(tx *Tx) error {
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
	view(t, s, func(tx *Tx) error {
		if tx.Taken(netip.MustParseAddr("10.0.0.2")) {
			t.Error("the v4 address reserved before the failure was not released")
		}
		ex, _ := tx.Exhaustions()
		eq(t, "exhaustions", ex, map[int]Exhaustion{1: {Count: 1, Last: testTime, RangeSet: "fd00::1-fd00::7"}})
		return nil
	})
	// host-local keeps the moved round-robin point: the next pod gets .3, not .2.
	eq(t, "v4 last reserved after", lastReserved(t, s, 0), "10.0.0.2")
	eq(t, "next v4 ADD", mustGet(t, s, []StoredRangeSet{set4}, "c2"), []string{"10.0.0.3"})

	// Each failing ADD is counted.
	alloc(t, s, sets, "c3", "eth0")
	view(t, s, func(tx *Tx) error {
		ex, _ := tx.Exhaustions()
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

func TestRelease(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*Record{rec("10.0.0.2", "c1", "eth0"), rec("fd00::2", "c1", "eth0"), rec("10.0.0.3", "c1", "net1"),
			rec("10.0.0.4", "legacy", ""), rec("10.0.0.5", "mixed", ""), rec("10.0.0.6", "mixed", "eth0")} {
			r.PodNamespace, r.PodName = "ns", "p"
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	eq(t, "DEL c1/eth0", release(t, s, "c1", "eth0"), []string{"10.0.0.2", "fd00::2"})
	eq(t, "DEL c1/eth0 again", release(t, s, "c1", "eth0"), []string{})
	eq(t, "DEL unknown", release(t, s, "nobody", "eth0"), []string{})
	eq(t, "c1/net1 untouched", held(t, s, "c1", "net1"), []string{"10.0.0.3"})
	// An ID-only record is released by a DEL for any interface of its container.
	eq(t, "DEL legacy/eth0", release(t, s, "legacy", "eth0"), []string{"10.0.0.4"})
	// host-local falls back to ID-only records only when the attachment has none.
	eq(t, "DEL mixed/eth0", release(t, s, "mixed", "eth0"), []string{"10.0.0.6"})
	eq(t, "DEL mixed/eth0 again", release(t, s, "mixed", "eth0"), []string{"10.0.0.5"})
	view(t, s, func(tx *Tx) error {
		eq(t, "left", tx.Count(), 1)
		log, err := tx.AuditLog(100)
		if err != nil {
			return err
		}
		if len(log) != 5 {
			t.Fatalf("audit log has %d events, want 5: %+v", len(log), log)
		}
		eq(t, "first audit event", log[0], AuditEvent{Time: testTime, Action: "release", Reason: "DEL",
			IP: netip.MustParseAddr("10.0.0.2"), ContainerID: "c1", IfName: "eth0", Pod: "ns/p", By: "plugin"})
		checkIndex(t, tx)
		return nil
	})
}

func TestCommit(t *testing.T) {
	s := newStore(t)
	sets := []StoredRangeSet{set4, set6}
	mustGet(t, s, sets, "c1")
	mustGet(t, s, sets, "c2")
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.6", "legacy", "")) })
	later := testTime.Add(time.Minute)
	commit := func(id, ifname string) int {
		var n int
		update(t, s, func(tx *Tx) error {
			var err error
			n, err = Commit(tx, id, ifname, later)
			return err
		})
		return n
	}
	eq(t, "Commit c1", commit("c1", "eth0"), 2)
	eq(t, "Commit c1 again", commit("c1", "eth0"), 0)
	eq(t, "Commit unknown", commit("c9", "eth0"), 0)
	eq(t, "Commit legacy", commit("legacy", "eth0"), 1)
	view(t, s, func(tx *Tx) error {
		return tx.ForEach(func(r *Record) error {
			want := StatePending
			if r.ContainerID != "c2" {
				want = StateCommitted
			}
			if r.State != want || (want == StateCommitted) != r.Committed.Equal(later) {
				t.Errorf("%s (%s): state %s committed %v, want %s", r.IP, r.ContainerID, r.State, r.Committed, want)
			}
			return nil
		})
	})
}

func TestGarbageCollect(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*Record{rec("10.0.0.2", "c1", "eth0"), rec("fd00::2", "c1", "eth0"), rec("10.0.0.3", "c1", "net1"),
			rec("10.0.0.4", "c2", "eth0"), rec("10.0.0.5", "c3", ""), rec("10.0.0.6", "c4", "")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	var gone []*Record
	update(t, s, func(tx *Tx) error {
		var err error
		gone, err = GarbageCollect(tx, []Attachment{{"c1", "eth0"}, {"c3", "eth0"}, {"c9", "eth0"}}, testTime)
		return err
	})
	eq(t, "released", ips(gone), []string{"10.0.0.3", "10.0.0.4", "10.0.0.6"})
	view(t, s, func(tx *Tx) error {
		var left []string
		tx.ForEach(func(r *Record) error { left = append(left, r.IP.String()); return nil })
		eq(t, "kept", left, []string{"10.0.0.2", "10.0.0.5", "fd00::2"})
		log, _ := tx.AuditLog(10)
		if len(log) != 3 || log[0].Action != "gc" || log[0].By != "plugin" || !strings.Contains(log[0].Reason, "valid-attachments") {
			t.Errorf("audit log = %+v", log)
		}
		checkIndex(t, tx)
		return nil
	})
	// An empty list releases everything: the caller must refuse a missing list.
	update(t, s, func(tx *Tx) error {
		gone, _ = GarbageCollect(tx, nil, testTime)
		return nil
	})
	eq(t, "released with an empty list", len(gone), 3)
}

func TestFullRangeSets(t *testing.T) {
	s := newStore(t)
	two := set(rng("10.1.0.0/29", "10.1.0.2", "10.1.0.3", "10.1.0.1"), rng("10.1.1.0/29", "10.1.1.2", "10.1.1.3", "10.1.1.3"))
	sets := []StoredRangeSet{set4, set6, two}
	full := func() []int {
		var out []int
		view(t, s, func(tx *Tx) error { out = FullRangeSets(tx, sets); return nil })
		return out
	}
	eq(t, "fresh", full(), nil)
	for i := range 6 {
		mustGet(t, s, []StoredRangeSet{set6}, fmt.Sprint("v6-", i))
	}
	eq(t, "v6 full", full(), []int{1})
	mustGet(t, s, []StoredRangeSet{two}, "t1")
	mustGet(t, s, []StoredRangeSet{two}, "t2")
	eq(t, "two ranges, one free address left", full(), []int{1})
	mustGet(t, s, []StoredRangeSet{two}, "t3") // 10.1.1.3 is the gateway
	eq(t, "v6 and two-range set full", full(), []int{1, 2})
	release(t, s, "v6-3", "eth0")
	eq(t, "after a release", full(), []int{2})
}

func TestUsage(t *testing.T) {
	s := newStore(t)
	gwOutside := set(rng("10.2.0.0/28", "10.2.0.4", "10.2.0.8", "10.2.0.1"), rng("10.2.1.0/28", "10.2.1.1", "10.2.1.14", "10.2.1.14"))
	big6 := set(rng("fd01::/64", "fd01::1", "fd01::ffff:ffff:ffff:ffff", "fd01::1"))
	sets := []StoredRangeSet{set4, set6, gwOutside, big6}
	mustGet(t, s, sets, "c1")
	mustGet(t, s, sets, "c2")
	update(t, s, func(tx *Tx) error {
		for _, r := range []*Record{
			rec("10.0.0.7", "x", "eth0"),  // in set4's subnet, past rangeEnd
			rec("10.2.0.2", "x", "eth0"),  // in gwOutside's subnet, before rangeStart
			rec("10.0.1.1", "x", "eth0"),  // in no range set
			rec("fd01::1", "x", "eth0"),   // big6's gateway, reserved under an older config
			rec("10.2.1.14", "x", "eth1"), // gwOutside's second gateway, likewise
		} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	var got []PoolUsage
	view(t, s, func(tx *Tx) error { got = Usage(tx, sets); return nil })
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	want := []struct {
		desc string
		size *big.Int
		used int
		free *big.Int
	}{
		{"10.0.0.1-10.0.0.6", big.NewInt(5), 2, big.NewInt(3)},
		{"fd00::1-fd00::7", big.NewInt(6), 2, big.NewInt(4)},
		{"10.2.0.4-10.2.0.8,10.2.1.1-10.2.1.14", big.NewInt(5 + 13), 2, big.NewInt(16)},
		// Exact: 2^64-4, which a float64 would round to 2^64.
		{"fd01::1-fd01::ffff:ffff:ffff:ffff", new(big.Int).Sub(two64, big.NewInt(2)), 2, new(big.Int).Sub(two64, big.NewInt(4))},
	}
	if len(got) != len(want) {
		t.Fatalf("Usage returned %d pools", len(got))
	}
	for i, w := range want {
		g := got[i]
		if g.RangeSet != i || g.Desc != w.desc || g.Size.Cmp(w.size) != 0 || g.Used != w.used || g.Free().Cmp(w.free) != 0 {
			t.Errorf("pool %d = {%d %q size %v used %d free %v}, want {%q size %v used %d free %v}",
				i, g.RangeSet, g.Desc, g.Size, g.Used, g.Free(), w.desc, w.size, w.used, w.free)
		}
	}
	// A full pool reports zero free, never a negative count.
	for i := range 3 {
		mustGet(t, s, []StoredRangeSet{set4}, fmt.Sprint("fill-", i))
	}
	view(t, s, func(tx *Tx) error {
		u := Usage(tx, []StoredRangeSet{set4})[0]
		if u.Free().Sign() != 0 || u.Used != 5 {
			t.Errorf("full pool: used %d free %v, want 5 and 0", u.Used, u.Free())
		}
		eq(t, "full range sets", FullRangeSets(tx, []StoredRangeSet{set4}), []int{0})
		return nil
	})
}
