package reclaim

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestDecideTable(t *testing.T) {
	type want struct {
		action    Action
		reason    Reason
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
		netnsDoubt   string
		predatesBoot bool
		cri          CRIView
		api          APIView
		now          time.Time
		want         want
	}{
		// Listed sandboxes.
		{name: "ready sandbox is live and resets misses",
			rec: due(), cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxReady}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "pending record whose address the ready sandbox lists is committed",
			rec: prec(pending), cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipOther, ipA}}), now: late,
			want: want{MarkCommitted, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "pending record, ready sandbox without this address: live, not committed",
			rec: prec(pending), cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipOther}}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "pending record, ready sandbox whose IPs were not fetched: live, not committed",
			rec: prec(pending), cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxReady}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "committed record is not committed again",
			rec: prec(), cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipA}}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "NOTREADY sandbox is stale, never reclaimed, misses reset",
			rec: prec(missed(50, t0)), netnsGone: true, cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxNotReady}), now: late,
			want: want{Keep, "stale", 0, time.Time{}, SandboxNotReady, false}},
		{name: "UNKNOWN sandbox is stale, never reclaimed, misses reset",
			rec: prec(missed(50, t0)), netnsGone: true, cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxUnknown}), now: late,
			want: want{Keep, "stale", 0, time.Time{}, SandboxUnknown, false}},
		{name: "another sandbox listed with this address does not make the record live",
			rec: prec(), cri: criAt(late, PodSandbox{ID: "sb-b", State: SandboxReady, IPs: []netip.Addr{ipA}}), now: late,
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
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "pending record absent long enough is reclaimed too",
			rec: due(pending), cri: criAt(late), now: late,
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "grace exactly elapsed, min-age exactly reached: reclaimed",
			rec:  prec(func(r *allocator.Record) { r.Created = late.Add(-5 * time.Minute) }, missed(2, late.Add(-2*time.Minute))),
			cri:  criAt(late),
			now:  late,
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-2 * time.Minute), SandboxAbsent, true}},
		{name: "misses counter without a first-miss time restarts the absence clock",
			rec: prec(func(r *allocator.Record) { r.Obs = allocator.Observation{Misses: 7} }), cri: criAt(late), now: late,
			want: want{Keep, "absent", 8, late, SandboxAbsent, true}},

		// Proof of death: the netns is gone, or the record predates the boot.
		{name: "netns gone: reclaimed at the first miss though younger than min-age and grace",
			rec:       prec(func(r *allocator.Record) { r.Created = late.Add(-time.Second) }),
			netnsGone: true, cri: criAt(late), now: late,
			want: want{Release, ReleaseNetnsGone, 1, late, SandboxAbsent, true}},
		{name: "netns gone with --netns-grace: kept while absent shorter",
			policy:    &netnsGracePolicy,
			rec:       prec(func(r *allocator.Record) { r.Created = late.Add(-time.Minute) }, missed(2, late.Add(-29*time.Second))),
			netnsGone: true, cri: criAt(late), now: late,
			want: want{Keep, "absent", 3, late.Add(-29 * time.Second), SandboxAbsent, true}},
		{name: "netns gone with --netns-grace: reclaimed once it elapsed, whatever --misses",
			policy:    &netnsGracePolicy,
			rec:       prec(func(r *allocator.Record) { r.Created = late.Add(-time.Minute) }, missed(1, late.Add(-30*time.Second))),
			netnsGone: true, cri: criAt(late), now: late,
			want: want{Release, ReleaseNetnsGone, 2, late.Add(-30 * time.Second), SandboxAbsent, true}},
		// The netns path is gone but its namespace is held (or the
		// directory's numbers were reused): no proof; the rules without
		// proof apply and the detail says why.
		{name: "netns path gone, namespace still held: no proof, the first miss is kept",
			rec:        prec(func(r *allocator.Record) { r.Created = late.Add(-time.Second) }),
			netnsDoubt: heldDoubt, cri: criAt(late), now: late,
			want: want{Keep, "absent", 1, late, SandboxAbsent, true}},
		{name: "netns path gone, namespace still held: reclaimed only as sandbox_absent, when due",
			rec:        due(),
			netnsDoubt: heldDoubt, cri: criAt(late), now: late,
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "predates boot: reclaimed at the first miss",
			rec: prec(), predatesBoot: true, cri: criAt(late), now: late,
			want: want{Release, ReleasePredatesBoot, 1, late, SandboxAbsent, true}},
		{name: "predates boot but listed READY: live",
			rec: prec(), predatesBoot: true, cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxReady}), now: late,
			want: want{Keep, "live", 0, time.Time{}, SandboxReady, false}},
		{name: "predates boot but listed NOTREADY: the runtime's to release",
			rec: prec(), predatesBoot: true, cri: criAt(late, PodSandbox{ID: "sb-a", State: SandboxNotReady}), now: late,
			want: want{Keep, "stale", 0, time.Time{}, SandboxNotReady, false}},
		{name: "proof is not asked of the API: a pod listing the address does not veto",
			rec: prec(), netnsGone: true, cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipA}}),
			want: want{Release, ReleaseNetnsGone, 1, late, SandboxAbsent, true}},
		{name: "proof with an unreadable API is still reclaimed",
			rec: prec(), predatesBoot: true, cri: criAt(late), now: late, api: APIView{Enabled: true},
			want: want{Release, ReleasePredatesBoot, 1, late, SandboxAbsent, true}},
		{name: "proof but created after the CRI list: in flight",
			rec: prec(func(r *allocator.Record) { r.Created = late.Add(time.Millisecond) }), netnsGone: true, cri: criAt(late), now: late.Add(time.Second),
			want: want{Keep, "in_flight", 0, time.Time{}, "", false}},
		{name: "proof but an incomplete CRI answer: nothing",
			rec: prec(), netnsGone: true, predatesBoot: true, cri: CRIView{Why: "down", ListedAt: late, Sandboxes: map[string]PodSandbox{}}, now: late,
			want: want{Keep, "cri_unavailable", 0, time.Time{}, "", false}},

		// CRI answers that cannot be trusted.
		// A leak candidate stays one (IsLeakCandidate: its misses are kept)
		// until a complete answer lists its sandbox: an outage is no sighting.
		{name: "incomplete CRI answer reclaims nothing and keeps the observation",
			rec: due(), netnsGone: true, cri: CRIView{Why: "ListPodSandbox: deadline exceeded", ListedAt: late, Sandboxes: map[string]PodSandbox{}}, now: late,
			want: want{Keep, "cri_unavailable", 2, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "incomplete CRI answer listing the sandbox still says nothing",
			rec: due(), cri: CRIView{Why: "x", ListedAt: late, Sandboxes: map[string]PodSandbox{"sb-a": {ID: "sb-a", State: SandboxReady}}}, now: late,
			want: want{Keep, "cri_unavailable", 2, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "incomplete CRI answer over a record never missed: no candidate",
			rec: prec(), cri: CRIView{Why: "x", ListedAt: late, Sandboxes: map[string]PodSandbox{}}, now: late,
			want: want{Keep, "cri_unavailable", 0, time.Time{}, "", false}},
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
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "StatefulSet reused the name, new pod has no address yet: reclaimed",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-new", Namespace: "default", Name: "web-0"}),
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "the record's pod is not terminated but has no address: no veto",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0"}),
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "the record's pod lists another address: no veto",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipOther}}),
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "terminated pod still listing the address: no veto",
			rec: due(), cri: criAt(late), now: late,
			api:  apiWith(Pod{UID: "uid-old", Namespace: "default", Name: "web-0", IPs: []netip.Addr{ipA}, Terminated: true}),
			want: want{Release, ReleaseSandboxAbsent, 3, late.Add(-5 * time.Minute), SandboxAbsent, true}},
		{name: "API vetoes only what would otherwise be reclaimed",
			rec: prec(missed(1, t0)), cri: criAt(late), now: late, api: APIView{Enabled: true},
			want: want{Keep, "absent", 2, t0, SandboxAbsent, true}},

		// The clock.
		{name: "clock before the record's creation (CRI listed at now): no reclaim",
			rec: due(), cri: criAt(t0.Add(-time.Hour)), now: t0.Add(-time.Hour),
			want: want{Keep, "in_flight", -1, time.Time{}, "", true}}, // its earlier misses are kept
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
			d := decide1(p, Candidate{Record: tc.rec, NetnsGone: tc.netnsGone, NetnsDoubt: tc.netnsDoubt, PredatesBoot: tc.predatesBoot}, tc.cri, tc.api, tc.now)
			if tc.netnsDoubt != "" && !strings.Contains(d.Detail, "netns proof unavailable: "+tc.netnsDoubt) {
				t.Errorf("detail %q does not say why the netns proves nothing", d.Detail)
			}
			if d.Action != tc.want.action || d.Reason != tc.want.reason {
				t.Fatalf("action=%v reason=%q (%s), want action=%v reason=%q", d.Action, d.Reason, d.Detail, tc.want.action, tc.want.reason)
			}
			if d.Record != tc.rec {
				t.Errorf("decision is for another record")
			}
			if d.Obs.Verdict != string(d.Reason) {
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
			if d.Candidate != tc.want.candidate || d.Candidate != IsLeakCandidate(d.Obs) {
				t.Errorf("Candidate=%v (IsLeakCandidate %v), want %v", d.Candidate, IsLeakCandidate(d.Obs), tc.want.candidate)
			}
			if d.Action == Release && !strings.Contains(d.Detail, "absent") {
				t.Errorf("reclaim detail %q does not say why", d.Detail)
			}
			// Decide is pure: the record it was given is not modified.
			if tc.rec.Obs != before.Obs || tc.rec.State != before.State {
				t.Errorf("Decide modified its input record: %+v -> %+v", before.Obs, tc.rec.Obs)
			}
		})
	}
}
