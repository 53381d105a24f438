package reclaim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// t0 is the policy tests' epoch: every record is created relative to it.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testPolicy is the daemon's default policy (docs/contracts.md flags).
// heldDoubt is the words of a netns whose path is gone while its namespace
// is held (allocator.NetnsHeld).
var heldDoubt = allocator.NetnsHeld.Doubt(&allocator.Record{NetnsWitness: allocator.NetnsWitness{Netns: allocator.NsID{Dev: 4, Ino: 4026532177}}}, allocator.NetnsJudgeView{})

var testPolicy = Policy{Misses: 3, Grace: 2 * time.Minute, MinAge: 5 * time.Minute, NetnsGrace: 0, MaxReclaimFraction: DefaultMaxFraction}

// netnsGracePolicy is testPolicy with a 30s --netns-grace.
var netnsGracePolicy = func() Policy { p := testPolicy; p.NetnsGrace = 30 * time.Second; return p }()

const testPool = 254

var ipA = netip.MustParseAddr("10.0.0.10")

var ipOther = netip.MustParseAddr("10.0.0.99")

// prec is a record of pod default/web-0 created at t0, committed, never observed.
func prec(mods ...func(*allocator.Record)) *allocator.Record {
	r := &allocator.Record{
		IP: ipA, PrefixLen: 24, ContainerID: "sb-a", IfName: "eth0", Network: "podnet",
		PodNamespace: "default", PodName: "web-0", PodUID: "uid-old",
		Netns: "/var/run/netns/cni-a", State: allocator.StateCommitted, Source: "add",
		Created: t0, Committed: t0,
	}
	for _, m := range mods {
		m(r)
	}
	return r
}

func pending(r *allocator.Record) { r.State, r.Committed = allocator.StatePending, time.Time{} }

// missed gives the record an observation of n consecutive absences since first.
func missed(n int, first time.Time) func(*allocator.Record) {
	return func(r *allocator.Record) {
		r.Obs = allocator.Observation{Misses: n, FirstMissed: first, SandboxState: SandboxAbsent, Verdict: "absent"}
	}
}

// criAt is a complete CRI answer listed at `at` with the given sandboxes.
func criAt(at time.Time, sbs ...PodSandbox) CRIView {
	v := CRIView{Complete: true, ListedAt: at, Sandboxes: map[string]PodSandbox{}}
	for _, sb := range sbs {
		v.Sandboxes[sb.ID] = sb
	}
	return v
}

func apiWith(pods ...Pod) APIView {
	v := APIView{Enabled: true, Available: true, PodsByUID: map[string]Pod{}}
	for _, p := range pods {
		v.PodsByUID[p.UID] = p
	}
	return v
}

func decide1(p Policy, c Candidate, cri CRIView, api APIView, now time.Time) Decision {
	v := Decide(p, []Candidate{c}, testPool, cri, api, now)
	if len(v.Decisions) != 1 {
		panic(fmt.Sprintf("Decide returned %d decisions for 1 candidate", len(v.Decisions)))
	}
	return v.Decisions[0]
}

// late is the time of the sweep most table cases run at.
var late = t0.Add(time.Hour)

// due is a record that the default policy reclaims at `late` when its sandbox is
// absent: created an hour earlier, absent for two sweeps over five minutes.
func due(mods ...func(*allocator.Record)) *allocator.Record {
	return prec(append([]func(*allocator.Record){missed(2, late.Add(-5*time.Minute))}, mods...)...)
}

// testRanges is one range set, 10.1.0.10-10.1.0.200 (191 addresses).
var testRanges = []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
	Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: netip.MustParseAddr("10.1.0.10"),
	End: netip.MustParseAddr("10.1.0.200"), Gateway: netip.MustParseAddr("10.1.0.1"),
}}}}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
