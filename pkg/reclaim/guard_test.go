package reclaim

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestDecideMassReclaimGuard(t *testing.T) {
	leaks := func(n int) []Candidate {
		var cs []Candidate
		for i := range n {
			cs = append(cs, Candidate{Record: due(func(r *allocator.Record) {
				r.IP = netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
				r.ContainerID = fmt.Sprintf("sb-leak-%d", i)
			})})
		}
		// One live record rides along; the guard must not touch it.
		cs = append(cs, Candidate{Record: prec(pending, func(r *allocator.Record) { r.ContainerID = "sb-live" })})
		return cs
	}
	view := criAt(late, PodSandbox{ID: "sb-live", State: SandboxReady, IPs: []netip.Addr{ipA}})
	cases := []struct {
		name     string
		fraction float64
		held     int // records the network holds
		leaks    int
		guarded  bool
	}{
		{"above the limit", 0.5, 10, 6, true},
		{"exactly at the limit", 0.5, 10, 5, false},
		{"below the limit", 0.5, 10, 4, false},
		{"every record allowed with fraction 1", 1, 10, 10, false},
		{"a tiny fraction still allows one reclaim", 0.01, 10, 1, false},
		{"a tiny fraction refuses two", 0.01, 10, 2, true},
		{"exactly at a limit that is inexact in binary (0.57*100)", 0.57, 100, 57, false},
		{"one above a limit that is inexact in binary", 0.57, 100, 58, true},
		{"exactly at a limit that is inexact in binary (0.29*100)", 0.29, 100, 29, false},
		// Wrong socket on a default node: 100 live pods on a /24, none listed.
		{"every record of a default node at once (wrong socket)", DefaultMaxFraction, 100, 100, true},
		{"half of them plus one", DefaultMaxFraction, 100, 51, true},
		// Small networks: a lone leak is reclaimed, all of them at once is not.
		{"lone leak on a one-record network", DefaultMaxFraction, 1, 1, false},
		{"one of two records", DefaultMaxFraction, 2, 1, false},
		{"both of two records", DefaultMaxFraction, 2, 2, true},
		{"one of three records", DefaultMaxFraction, 3, 1, false},
		{"two of three records", DefaultMaxFraction, 3, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy
			p.MaxReclaimFraction = tc.fraction
			v := Decide(p, leaks(tc.leaks), tc.held, view, APIView{}, late)
			if v.Guarded != tc.guarded || v.WouldReclaim != tc.leaks {
				t.Fatalf("Guarded=%v WouldReclaim=%d, want %v and %d", v.Guarded, v.WouldReclaim, tc.guarded, tc.leaks)
			}
			reclaimed := 0
			for _, d := range v.Decisions {
				if d.Record.ContainerID == "sb-live" {
					if d.Action != MarkCommitted || d.Reason != "live" {
						t.Errorf("live record: %v %q, want MarkCommitted live", d.Action, d.Reason)
					}
					continue
				}
				switch {
				case tc.guarded && (d.Action != Keep || d.Reason != "guarded" || d.Obs.Verdict != "guarded" || !strings.Contains(d.Detail, "mass-reclaim guard")):
					t.Errorf("guarded sweep: %v %q verdict %q detail %q, want keep guarded", d.Action, d.Reason, d.Obs.Verdict, d.Detail)
				case tc.guarded && (!d.Candidate || d.Obs.Misses != 3):
					t.Errorf("guarded record lost its observation: candidate %v obs %+v", d.Candidate, d.Obs)
				case d.Action == Release:
					reclaimed++
				}
			}
			if want := map[bool]int{true: 0, false: tc.leaks}[tc.guarded]; reclaimed != want {
				t.Fatalf("reclaimed %d, want %d", reclaimed, want)
			}
		})
	}
	// A vetoed record does not count against the guard.
	cs := leaks(6)
	api := apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{cs[0].Record.IP}})
	v := Decide(testPolicy, cs, 10, view, api, late)
	if v.Guarded || v.WouldReclaim != 5 {
		t.Fatalf("with one of six vetoed: Guarded=%v WouldReclaim=%d, want false and 5", v.Guarded, v.WouldReclaim)
	}
}

func TestWrites(t *testing.T) {
	stored := allocator.Observation{Misses: 1, FirstMissed: t0, SandboxState: SandboxAbsent, Verdict: "absent"}
	rec := func(o allocator.Observation) *allocator.Record { return prec(func(r *allocator.Record) { r.Obs = o }) }
	with := func(mod func(*allocator.Observation)) allocator.Observation {
		o := stored
		mod(&o)
		return o
	}
	// Each kind of decision, as Decide makes them, on a record stored with
	// `stored` (or no observation at all).
	var (
		same      = Decision{Record: rec(stored), Action: Keep, Obs: stored}
		verdict   = Decision{Record: rec(stored), Action: Keep, Obs: with(func(o *allocator.Observation) { o.Verdict = "in_flight" })}
		state     = Decision{Record: rec(stored), Action: Keep, Obs: with(func(o *allocator.Observation) { o.SandboxState = SandboxNotReady })}
		firstSeen = Decision{Record: rec(allocator.Observation{}), Action: Keep, Obs: allocator.Observation{SandboxState: SandboxReady, Verdict: "live"}}
		miss      = Decision{Record: rec(stored), Action: Keep, Obs: with(func(o *allocator.Observation) { o.Misses = 2 })}
		restart   = Decision{Record: rec(stored), Action: Keep, Obs: with(func(o *allocator.Observation) { o.FirstMissed = t0.Add(time.Minute) })}
		firstMiss = Decision{Record: rec(allocator.Observation{}), Action: Keep, Obs: stored}
		listed    = Decision{Record: rec(stored), Action: Keep, Obs: allocator.Observation{SandboxState: SandboxReady, Verdict: "live"}}
		commit    = Decision{Record: rec(stored), Action: MarkCommitted, Obs: stored}
		reclaim   = Decision{Record: rec(stored), Action: Release, Obs: stored}
	)
	cases := []struct {
		name    string
		ds      []Decision
		maxInfo int
		want    []int
	}{
		{"nothing changes: nothing to write", []Decision{same, same}, 10, nil},
		{"what the policy reads is always written", []Decision{miss, restart, firstMiss, listed, commit, reclaim}, 0, []int{0, 1, 2, 3, 4, 5}},
		{"a commit or reclaim that changes no observation is written", []Decision{commit, reclaim}, 0, []int{0, 1}},
		{"informational changes within the bound are written", []Decision{verdict, state, firstSeen}, 3, []int{0, 1, 2}},
		{"informational changes beyond the bound wait, in order", []Decision{firstSeen, verdict, same, state, firstSeen}, 2, []int{0, 1}},
		{"informational changes do not count against policy ones", []Decision{firstSeen, miss, firstSeen, reclaim, firstSeen}, 1, []int{0, 1, 3}},
		{"no informational budget", []Decision{verdict, miss, state}, 0, []int{1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Writes(tc.ds, tc.maxInfo); !slices.Equal(got, tc.want) {
				t.Errorf("Writes = %v, want %v", got, tc.want)
			}
		})
	}
}
