package reclaim

import (
	"net/netip"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// The policy over sequences of sweeps: timelines, clock steps, long ADDs,
// CRI outages.

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
		if d.Action == Release {
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
				var trail []Reason
				for _, d := range ds {
					trail = append(trail, d.Reason)
				}
				t.Fatalf("reclaimed at sweep %d, want %d; reasons %v", got, tc.want, trail)
			}
			if got >= 0 {
				d := ds[got]
				want := ReleaseSandboxAbsent
				if tc.netnsGone {
					want = ReleaseNetnsGone
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
	d := decide1(testPolicy, Candidate{Record: &rec}, criAt(now, PodSandbox{ID: "sb-a", State: SandboxReady, IPs: []netip.Addr{ipA}}), APIView{}, now)
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
	if d := decide1(testPolicy, Candidate{Record: &rec}, criAt(now), APIView{}, now); d.Action != Release || d.Obs.Misses != 3 {
		t.Fatalf("first good list after the outage: %v %q misses %d, want reclaim at 3 misses", d.Action, d.Reason, d.Obs.Misses)
	}
}
