package gc

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

// t0 is the policy tests' epoch: every record is created relative to it.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testPolicy is the daemon's default policy (docs/contracts.md flags).
var testPolicy = Policy{Misses: 3, Grace: 2 * time.Minute, MinAge: 5 * time.Minute, NetnsGrace: 0, MaxReclaimFraction: DefaultMaxReclaimFraction}

// netnsGracePolicy is testPolicy with a 30s --netns-grace.
var netnsGracePolicy = func() Policy { p := testPolicy; p.NetnsGrace = 30 * time.Second; return p }()

const testPool = 254

var (
	ipA     = netip.MustParseAddr("10.0.0.10")
	ipOther = netip.MustParseAddr("10.0.0.99")
)

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
func criAt(at time.Time, sbs ...Sandbox) CRIView {
	v := CRIView{Complete: true, ListedAt: at, Sandboxes: map[string]Sandbox{}}
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

func TestDecideTable(t *testing.T) {
	type want struct {
		action    Action
		reason    string
		misses    int // -1: do not check
		first     time.Time
		sbState   string
		candidate bool
	}
	cases := []struct {
		name         string
		policy       *Policy // nil: testPolicy
		rec          *allocator.Record
		netnsGone    bool
		predatesBoot bool
		cri          CRIView
		api          APIView
		now          time.Time
		want         want
	}{
		// Listed sandboxes.
		{name: "ready sandbox is live and resets misses",
			rec: due(), cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxReady}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "pending record whose address the ready sandbox lists is committed",
			rec: prec(pending), cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipOther, ipA}}), now: late,
			want: want{MarkCommitted, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "pending record, ready sandbox without this address: live, not committed",
			rec: prec(pending), cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipOther}}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "pending record, ready sandbox whose IPs were not fetched: live, not committed",
			rec: prec(pending), cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxReady}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "committed record is not committed again",
			rec: prec(), cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipA}}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "NOTREADY sandbox is stale, never reclaimed, misses reset",
			rec: prec(missed(50, t0)), netnsGone: true, cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxNotReady}), now: late,
			want: want{Keep, "stale", 0, time.Time{}, SandboxNotReady, false}},
		{name: "UNKNOWN sandbox is stale, never reclaimed, misses reset",
			rec: prec(missed(50, t0)), netnsGone: true, cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxUnknown}), now: late,
			want: want{Keep, "stale", 0, time.Time{}, SandboxUnknown, false}},
		{name: "another sandbox listed with this address does not make the record live",
			rec: prec(), cri: criAt(late, Sandbox{ID: "sb-b", State: SandboxReady, IPs: []netip.Addr{ipA}}), now: late,
			want: want{Keep, "absent", 1, late, SandboxAbsent, true}},

		// Absent sandboxes.
		{name: "first absence starts counting",
			rec: prec(), cri: criAt(late), now: late,
			want: want{Keep, "absent", 1, late, SandboxAbsent, true}},
		{name: "absent for fewer sweeps than --misses, grace and age long past",
			rec: prec(missed(1, t0)), cri: criAt(late), now: late,
			want: want{Keep, "absent", 2, t0, SandboxAbsent, true}},
		{name: "misses reached but grace not elapsed",
			rec: prec(missed(2, late.Add(-time.Minute))), cri: criAt(late), now: late,
			want: want{Keep, "absent", 3, late.Add(-time.Minute), SandboxAbsent, true}},
		{name: "misses and grace reached but younger than --min-age",
			rec: prec(func(r *allocator.Record) { r.Created = late.Add(-4 * time.Minute) }, missed(2, late.Add(-3*time.Minute))),
			cri: criAt(late), now: late,
			want: want{Keep, "in_flight", 3, late.Add(-3 * time.Minute), SandboxAbsent, true}},
		{name: "misses, grace and min-age reached: reclaimed",
			rec: due(), cri: criAt(late), now: late,
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "pending record absent long enough is reclaimed too",
			rec: due(pending), cri: criAt(late), now: late,
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "grace exactly elapsed, min-age exactly reached: reclaimed",
			rec:  prec(func(r *allocator.Record) { r.Created = late.Add(-5 * time.Minute) }, missed(2, late.Add(-2*time.Minute))),
			cri:  criAt(late),
			now:  late,
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-2 * time.Minute), SandboxAbsent, true}},
		{name: "misses counter without a first-miss time restarts the absence clock",
			rec: prec(func(r *allocator.Record) { r.Obs = allocator.Observation{Misses: 7} }), cri: criAt(late), now: late,
			want: want{Keep, "absent", 8, late, SandboxAbsent, true}},

		// Proof of death: the netns is gone, or the record predates the boot.
		{name: "netns gone: reclaimed at the first miss though younger than min-age and grace",
			rec:       prec(func(r *allocator.Record) { r.Created = late.Add(-time.Second) }),
			netnsGone: true, cri: criAt(late), now: late,
			want: want{Reclaim, ReclaimNetnsGone, 1, late, SandboxAbsent, true}},
		{name: "netns gone with --netns-grace: kept while absent shorter",
			policy:    &netnsGracePolicy,
			rec:       prec(func(r *allocator.Record) { r.Created = late.Add(-time.Minute) }, missed(2, late.Add(-29*time.Second))),
			netnsGone: true, cri: criAt(late), now: late,
			want: want{Keep, "absent", 3, late.Add(-29 * time.Second), SandboxAbsent, true}},
		{name: "netns gone with --netns-grace: reclaimed once it elapsed, whatever --misses",
			policy:    &netnsGracePolicy,
			rec:       prec(func(r *allocator.Record) { r.Created = late.Add(-time.Minute) }, missed(1, late.Add(-30*time.Second))),
			netnsGone: true, cri: criAt(late), now: late,
			want: want{Reclaim, ReclaimNetnsGone, 2, late.Add(-30 * time.Second), SandboxAbsent, true}},
		{name: "predates boot: reclaimed at the first miss",
			rec: prec(), predatesBoot: true, cri: criAt(late), now: late,
			want: want{Reclaim, ReclaimPredatesBoot, 1, late, SandboxAbsent, true}},
		{name: "predates boot but listed READY: live",
			rec: prec(), predatesBoot: true, cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxReady}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "predates boot but listed NOTREADY: the runtime's to release",
			rec: prec(), predatesBoot: true, cri: criAt(late, Sandbox{ID: "sb-a", State: SandboxNotReady}), now: late,
			want: want{Keep, "stale", 0, time.Time{}, SandboxNotReady, false}},
		{name: "proof is not asked of the API: a pod listing the address does not veto",
			rec: prec(), netnsGone: true, cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipA}}),
			want: want{Reclaim, ReclaimNetnsGone, 1, late, SandboxAbsent, true}},
		{name: "proof with an unreadable API is still reclaimed",
			rec: prec(), predatesBoot: true, cri: criAt(late), now: late, api: APIView{Enabled: true},
			want: want{Reclaim, ReclaimPredatesBoot, 1, late, SandboxAbsent, true}},
		{name: "proof but created after the CRI list: in flight",
			rec: prec(func(r *allocator.Record) { r.Created = late.Add(time.Millisecond) }), netnsGone: true, cri: criAt(late), now: late.Add(time.Second),
			want: want{Keep, "in_flight", 0, time.Time{}, "", false}},
		{name: "proof but an incomplete CRI answer: nothing",
			rec: prec(), netnsGone: true, predatesBoot: true, cri: CRIView{Why: "down", ListedAt: late, Sandboxes: map[string]Sandbox{}}, now: late,
			want: want{Keep, "cri_unavailable", 0, time.Time{}, "", false}},

		// CRI answers that cannot be trusted.
		{name: "incomplete CRI answer reclaims nothing and keeps the observation",
			rec: due(), netnsGone: true, cri: CRIView{Why: "ListPodSandbox: deadline exceeded", ListedAt: late, Sandboxes: map[string]Sandbox{}}, now: late,
			want: want{Keep, "cri_unavailable", 2, late.Add(-5 * time.Minute), SandboxAbsent, false}},
		{name: "incomplete CRI answer listing the sandbox still says nothing",
			rec: due(), cri: CRIView{Why: "x", ListedAt: late, Sandboxes: map[string]Sandbox{"sb-a": {ID: "sb-a", State: SandboxReady}}}, now: late,
			want: want{Keep, "cri_unavailable", 2, late.Add(-5 * time.Minute), SandboxAbsent, false}},
		{name: "record created after the CRI list is in flight and not counted",
			rec: prec(func(r *allocator.Record) { r.Created = late.Add(time.Millisecond) }), cri: criAt(late), now: late.Add(time.Second),
			want: want{Keep, "in_flight", 0, time.Time{}, "", false}},

		// The Kubernetes API.
		{name: "API enabled but unreadable: nothing reclaimed",
			rec: due(), cri: criAt(late), api: APIView{Enabled: true}, now: late,
			want: want{Keep, "api_unavailable", 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "pod with the record's UID lists the address: vetoed",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipA}}),
			want: want{Keep, "vetoed", 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "another live pod on the node lists the address: vetoed",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-x", Namespace: "kube-system", Name: "other", IPs: []netip.Addr{ipOther, ipA}}),
			want: want{Keep, "vetoed", 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "StatefulSet reused the name with a new UID: no veto, reclaimed",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-new", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipOther}}),
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "StatefulSet reused the name, new pod has no address yet: reclaimed",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-new", Namespace: "default", Name: "web-0"}),
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "the record's pod is not terminated but has no address: no veto",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0"}),
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "the record's pod lists another address: no veto",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipOther}}),
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "terminated pod still listing the address: no veto",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipA}, Terminated: true}),
			want: want{Reclaim, ReclaimSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "API vetoes only what would otherwise be reclaimed",
			rec: prec(missed(1, t0)), cri: criAt(late), now: late, api: APIView{Enabled: true},
			want: want{Keep, "absent", 2, t0, SandboxAbsent, true}},

		// The clock.
		{name: "clock before the record's creation (CRI listed at now): no reclaim",
			rec: due(), cri: criAt(t0.Add(-time.Hour)), now: t0.Add(-time.Hour),
			want: want{Keep, "in_flight", -1, time.Time{}, "", false}},
		{name: "clock before the record's creation (no list time): no reclaim",
			rec: prec(missed(5, t0.Add(-3*time.Hour))), cri: criAt(time.Time{}), now: t0.Add(-time.Hour),
			want: want{Keep, "in_flight", 6, t0.Add(-3 * time.Hour), SandboxAbsent, true}},
		// The absence restarts at the new "now": measured from a first miss in
		// the future, it would not end until the clock caught up again.
		{name: "clock before the first miss: no reclaim, absence restarts",
			rec: prec(missed(5, late.Add(time.Hour))), cri: criAt(late), now: late,
			want: want{Keep, "absent", 6, late, SandboxAbsent, true}},
		{name: "clock before the first miss with netns gone and --netns-grace: no reclaim, absence restarts",
			policy: &netnsGracePolicy,
			rec:    prec(missed(5, late.Add(time.Hour))), netnsGone: true, cri: criAt(late), now: late,
			want: want{Keep, "absent", 6, late, SandboxAbsent, true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := *tc.rec
			p := testPolicy
			if tc.policy != nil {
				p = *tc.policy
			}
			d := decide1(p, Candidate{Record: tc.rec, NetnsGone: tc.netnsGone, PredatesBoot: tc.predatesBoot}, tc.cri, tc.api, tc.now)
			if d.Action != tc.want.action || d.Reason != tc.want.reason {
				t.Fatalf("action=%v reason=%q (%s), want action=%v reason=%q", d.Action, d.Reason, d.Detail, tc.want.action, tc.want.reason)
			}
			if d.Record != tc.rec {
				t.Errorf("decision is for another record")
			}
			if d.Obs.Verdict != d.Reason {
				t.Errorf("Obs.Verdict=%q, want the reason %q (hostlease-gc leaks shows it)", d.Obs.Verdict, d.Reason)
			}
			if d.Detail == "" {
				t.Errorf("no detail for reason %q", d.Reason)
			}
			if tc.want.misses >= 0 {
				// The stored count is capped at --misses: beyond it no decision changes.
				if want := min(tc.want.misses, testPolicy.Misses); d.Obs.Misses != want {
					t.Errorf("Obs.Misses=%d, want %d", d.Obs.Misses, want)
				}
				if !d.Obs.FirstMissed.Equal(tc.want.first) {
					t.Errorf("Obs.FirstMissed=%v, want %v", d.Obs.FirstMissed, tc.want.first)
				}
				if d.Obs.SandboxState != tc.want.sbState {
					t.Errorf("Obs.SandboxState=%q, want %q", d.Obs.SandboxState, tc.want.sbState)
				}
			}
			if d.Candidate != tc.want.candidate {
				t.Errorf("Candidate=%v, want %v", d.Candidate, tc.want.candidate)
			}
			if d.Action == Reclaim && !strings.Contains(d.Detail, "absent") {
				t.Errorf("reclaim detail %q does not say why", d.Detail)
			}
			// Decide is pure: the record it was given is not modified.
			if tc.rec.Obs != before.Obs || tc.rec.State != before.State {
				t.Errorf("Decide modified its input record: %+v -> %+v", before.Obs, tc.rec.Obs)
			}
		})
	}
}

// sweepSeq runs Decide for one record at each of times (the sandbox absent in
// all of them), feeding each decision's observation into the next sweep as the
// sweeper does. It returns the index of the sweep that reclaimed, or -1.
func sweepSeq(t *testing.T, p Policy, r *allocator.Record, netnsGone bool, times []time.Time) (int, []Decision) {
	t.Helper()
	rec := *r
	var ds []Decision
	for i, now := range times {
		d := decide1(p, Candidate{Record: &rec, NetnsGone: netnsGone}, criAt(now), APIView{}, now)
		ds = append(ds, d)
		if d.Action == Reclaim {
			return i, ds
		}
		rec.Obs = d.Obs
	}
	return -1, ds
}

func every(start time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(i) * step)
	}
	return out
}

func TestDecideTimeline(t *testing.T) {
	cases := []struct {
		name      string
		created   time.Time
		netnsGone bool
		times     []time.Time
		want      int // index of the reclaiming sweep, -1 for none
	}{
		// Sweeps 10 minutes apart: grace and min-age are long past at the
		// first one, so --misses decides: the third sweep reclaims.
		{"misses bind", t0, false, every(late, 10*time.Minute, 6), 2},
		// Sweeps 10s apart on an old record: three misses after 20s, but the
		// 2m grace counts from the first miss: reclaimed at +120s.
		{"grace binds", t0, false, every(late, 10*time.Second, 20), 12},
		// A record created at late-1s, sweeps every 10s: misses and grace are
		// met long before the record is 5 minutes old.
		{"min-age binds", late.Add(-time.Second), false, every(late, 10*time.Second, 40), 30},
		// netns gone: proof of death, reclaimed at the first sweep that
		// misses it (no misses, grace or min-age).
		{"netns gone", late.Add(-time.Second), true, every(late, 10*time.Second, 40), 0},
		// The clock jumps forward by hours between sweeps: time-based
		// conditions hold at once, but --misses sweeps are still needed.
		{"clock jumps forward hours", t0, false, []time.Time{late, late.Add(5 * time.Hour), late.Add(5*time.Hour + time.Second), late.Add(5*time.Hour + 2*time.Second)}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := prec(func(r *allocator.Record) { r.Created = tc.created })
			got, ds := sweepSeq(t, testPolicy, r, tc.netnsGone, tc.times)
			if got != tc.want {
				var trail []string
				for _, d := range ds {
					trail = append(trail, d.Reason)
				}
				t.Fatalf("reclaimed at sweep %d, want %d; reasons %v", got, tc.want, trail)
			}
			if got >= 0 {
				d := ds[got]
				want := ReclaimSandboxAbsent
				if tc.netnsGone {
					want = ReclaimNetnsGone
				}
				if d.Reason != want || !tc.netnsGone && d.Obs.Misses < testPolicy.Misses {
					t.Fatalf("reclaim reason %q misses %d, want %q and >= %d", d.Reason, d.Obs.Misses, want, testPolicy.Misses)
				}
			}
		})
	}
}

// A clock that ran hours ahead and was then corrected must not keep a leak
// for those hours: the absence restarts at the corrected time and the leak is
// reclaimed one grace period later.
func TestDecideClockCorrectedBackwards(t *testing.T) {
	rec := *prec()
	ahead := late.Add(6 * time.Hour)
	for i := range 2 { // two sweeps while the clock is six hours ahead
		now := ahead.Add(time.Duration(i) * 30 * time.Second)
		d := decide1(testPolicy, Candidate{Record: &rec}, criAt(now), APIView{}, now)
		rec.Obs = d.Obs
	}
	// NTP steps the clock back; sweeps continue every 30s.
	times := every(late, 30*time.Second, 20)
	got, ds := sweepSeq(t, testPolicy, &rec, false, times)
	if got < 0 {
		t.Fatalf("leak not reclaimed within %s of the clock correction (last: %s)", 20*30*time.Second, ds[len(ds)-1].Detail)
	}
	if at := times[got].Sub(late); at < testPolicy.Grace {
		t.Fatalf("reclaimed %s after the correction, before the %s grace measured on the corrected clock", at, testPolicy.Grace)
	}
}

// An ADD can be invisible in CRI for minutes (kubelet waits up to 4m). Its
// record, young and absent from every list, must survive any number of sweeps
// until --min-age, and become live once the sandbox shows up.
func TestDecideAddInFlightForMinutes(t *testing.T) {
	created := late
	r := prec(pending, func(r *allocator.Record) { r.Created = created })
	// A sweep every second for 4m59s: ~300 misses, grace long past.
	times := every(created.Add(time.Second), time.Second, 298)
	if got, ds := sweepSeq(t, testPolicy, r, false, times); got >= 0 {
		t.Fatalf("in-flight ADD reclaimed at sweep %d (%s)", got, ds[got].Detail)
	} else if last := ds[len(ds)-1]; last.Reason != "in_flight" || last.Obs.Misses != testPolicy.Misses {
		t.Fatalf("last verdict %q misses %d, want in_flight with misses capped at %d", last.Reason, last.Obs.Misses, testPolicy.Misses)
	}
	// The ADD finishes: the sandbox is READY with the address.
	rec := *r
	rec.Obs = allocator.Observation{Misses: 298, FirstMissed: created.Add(time.Second)}
	now := created.Add(299 * time.Second)
	d := decide1(testPolicy, Candidate{Record: &rec}, criAt(now, Sandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipA}}), APIView{}, now)
	if d.Action != MarkCommitted || d.Obs.Misses != 0 || !d.Obs.FirstMissed.IsZero() {
		t.Fatalf("finished ADD: action %v obs %+v, want MarkCommitted with misses reset", d.Action, d.Obs)
	}
	// A sandbox that comes back after absences starts its count afresh.
	rec.Obs = d.Obs
	got, _ := sweepSeq(t, testPolicy, &rec, false, every(now.Add(10*time.Minute), 10*time.Minute, 5))
	if got != 2 {
		t.Fatalf("after the sandbox was seen again, reclaimed at sweep %d, want 2 (a fresh count of 3)", got)
	}
}

// A failed or implausible CRI list never turns into absences, and a good list
// afterwards continues the count where it was.
func TestDecideCRIOutageKeepsCount(t *testing.T) {
	rec := *prec(missed(2, late.Add(-10*time.Minute)))
	for i := range 20 {
		now := late.Add(time.Duration(i) * time.Minute)
		d := decide1(testPolicy, Candidate{Record: &rec, NetnsGone: true}, CRIView{Why: "down", ListedAt: now}, APIView{}, now)
		if d.Action != Keep || d.Obs.Misses != 2 || !d.Obs.FirstMissed.Equal(late.Add(-10*time.Minute)) {
			t.Fatalf("sweep %d during outage: %v %q obs %+v", i, d.Action, d.Reason, d.Obs)
		}
		rec.Obs = d.Obs
	}
	now := late.Add(20 * time.Minute)
	if d := decide1(testPolicy, Candidate{Record: &rec}, criAt(now), APIView{}, now); d.Action != Reclaim || d.Obs.Misses != 3 {
		t.Fatalf("first good list after the outage: %v %q misses %d, want reclaim at 3 misses", d.Action, d.Reason, d.Obs.Misses)
	}
}

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
