package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// The policy's safeguards against a bad view of the node: an incomplete CRI
// answer, a mass reclaim; and which decisions a sweep writes.

// fakeListCRI is a CRI whose ListSandboxes answer is scripted.
type fakeListCRI struct {
	list []CRISandbox
	err  error
}

func (f *fakeListCRI) ListSandboxes(context.Context) ([]CRISandbox, error) { return f.list, f.err }
func (f *fakeListCRI) SandboxIPs(context.Context, string) ([]netip.Addr, error) {
	return nil, errors.New("not scripted")
}
func (f *fakeListCRI) Close() error { return nil }

// ListView judges the CRI answer; an answer it distrusts reclaims nothing
// through Decide and leaves observations as they were.
func TestListViewIncompleteReclaimsNothing(t *testing.T) {
	cases := []struct {
		name      string
		cri       *fakeListCRI
		committed int
		complete  bool
		why       string
	}{
		{"list error", &fakeListCRI{err: errors.New("connection refused")}, 1, false, "connection refused"},
		{"empty list while committed records exist", &fakeListCRI{list: []CRISandbox{}}, 3, false, "3 committed"},
		{"nil list while committed records exist", &fakeListCRI{}, 1, false, "no sandboxes"},
		{"sandbox without an ID", &fakeListCRI{list: []CRISandbox{{ID: "sb-z", State: SandboxReady}, {State: SandboxReady}}}, 0, false, "without an ID"},
		{"empty list on an empty node", &fakeListCRI{list: []CRISandbox{}}, 0, true, ""},
		{"other sandboxes listed", &fakeListCRI{list: []CRISandbox{{ID: "sb-z", State: SandboxReady}}}, 5, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			view, _ := ListView(context.Background(), tc.cri, tc.committed, late)
			if view.Complete != tc.complete {
				t.Fatalf("Complete=%v (why %q), want %v", view.Complete, view.Why, tc.complete)
			}
			if !view.ListedAt.Equal(late) {
				t.Errorf("ListedAt=%v, want the time the list was asked for", view.ListedAt)
			}
			if !strings.Contains(view.Why, tc.why) {
				t.Errorf("Why=%q, want it to mention %q", view.Why, tc.why)
			}
			recs := []*allocator.Record{due(), prec(missed(0, time.Time{}), func(r *allocator.Record) { r.IP, r.ContainerID = ipOther, "sb-b" })}
			v := Decide(testPolicy, []Candidate{{Record: recs[0], NetnsGone: true}, {Record: recs[1]}}, testPool, view, apiWith(), late)
			for i, d := range v.Decisions {
				if tc.complete {
					if i == 0 && d.Action != Reclaim {
						t.Errorf("complete answer without the sandbox: %v %q, want reclaim", d.Action, d.Reason)
					}
					continue
				}
				if d.Action != Keep || d.Reason != "cri_unavailable" {
					t.Errorf("record %s: %v %q, want keep cri_unavailable", d.Record.IP, d.Action, d.Reason)
				}
				o, want := d.Obs, recs[i].Obs
				if o.Misses != want.Misses || !o.FirstMissed.Equal(want.FirstMissed) || o.SandboxState != want.SandboxState {
					t.Errorf("record %s: observation changed %+v -> %+v", d.Record.IP, want, o)
				}
			}
		})
	}
}

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
	view := criAt(late, Sandbox{ID: "sb-live", State: SandboxReady, IPs: []netip.Addr{ipA}})
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
		{"every record of a default node at once (wrong socket)", DefaultMaxReclaimFraction, 100, 100, true},
		{"half of them plus one", DefaultMaxReclaimFraction, 100, 51, true},
		// Small networks: a lone leak is reclaimed, all of them at once is not.
		{"lone leak on a one-record network", DefaultMaxReclaimFraction, 1, 1, false},
		{"one of two records", DefaultMaxReclaimFraction, 2, 1, false},
		{"both of two records", DefaultMaxReclaimFraction, 2, 2, true},
		{"one of three records", DefaultMaxReclaimFraction, 3, 1, false},
		{"two of three records", DefaultMaxReclaimFraction, 3, 2, true},
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
				case d.Action == Reclaim:
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

func TestPolicyFromOptions(t *testing.T) {
	o := &Options{Misses: 4, Grace: time.Minute, MinAge: 7 * time.Minute, NetnsGrace: 5 * time.Second, MaxReclaimFraction: 0.25}
	want := Policy{Misses: 4, Grace: time.Minute, MinAge: 7 * time.Minute, NetnsGrace: 5 * time.Second, MaxReclaimFraction: 0.25}
	if got := PolicyFromOptions(o); got != want {
		t.Fatalf("PolicyFromOptions = %+v, want %+v", got, want)
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
		reclaim   = Decision{Record: rec(stored), Action: Reclaim, Obs: stored}
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
