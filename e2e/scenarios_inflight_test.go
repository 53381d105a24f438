package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestScenario3InFlightAddNotReclaimed: an ADD that stays in flight for many
// sweeps (the failplugin holds it after IPAM reserved the address) is
// invisible in CRI the whole time, so to hostlease-gc its record looks like a
// leak that has missed every sweep. --min-age (30s here) must keep it: the
// record is never reclaimed while the sandbox is being created, the sandbox
// ends READY with that address, and the record ends committed.
//
// The ADD is released only after the daemon has, while it was in flight,
// swept at least 5 times, counted at least --misses misses and given the
// in_flight verdict: the order of events is what is asserted, not a delay.
func TestScenario3InFlightAddNotReclaimed(t *testing.T) {
	const wantSweeps = 5
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.13.0/24", FailPlugin: true, Marker: true})
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
		"--interval", "1s", "--misses", "2", "--grace", "1s", "--min-age", "30s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
	t.Logf("hostlease-gc sweeping every 1s (misses 2, grace 1s, min-age 30s); the failplugin holds ADD until the daemon has judged it")
	n.touch(t, n.HoldAdd, "held by "+t.Name())

	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	pod := harness.Pod{Name: "slow-0", Namespace: "scenario3", UID: podUID("slow-0")}
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		id, err := env.RunPodSandbox(ctx, pod)
		done <- result{id, err}
	}()

	var (
		rec           *allocator.Record // the in-flight record, once seen
		sweepsAtStart float64
		maxMisses     int
		verdicts      = map[string]bool{}
	)
	// Hang guard only: the ADD is held until the daemon has judged the
	// record as often as this scenario needs (the record is written before
	// the first of those sweeps can count).
	waitFor(t, "the daemon judged the in-flight record", func() (bool, string) {
		select {
		case res := <-done:
			t.Fatalf("RunPodSandbox returned while its ADD was held: %v", res.err)
		default:
		}
		recs := n.records(t)
		if rec != nil && len(recs) == 0 {
			t.Fatalf("the in-flight record %s vanished %v into the ADD (sandbox not created yet)\n%s",
				rec.IP, time.Since(start).Round(time.Millisecond), d.LogTail(20))
		}
		if len(recs) != 1 {
			return false, describe(recs)
		}
		r := recs[0]
		if rec == nil {
			sweepsAtStart = sweeps(t, d)
			t.Logf("%v: IPAM reserved %s (state %s); CRI lists %d sandboxes while the chain runs",
				time.Since(start).Round(time.Millisecond), r.IP, r.State, countSandboxes(t, env))
		} else if r.ContainerID != rec.ContainerID || !r.Created.Equal(rec.Created) {
			t.Fatalf("record %s changed owner during the ADD: %s -> %s", r.IP, rec.ContainerID, r.ContainerID)
		}
		rec = r
		if r.State != allocator.StatePending {
			t.Fatalf("record %s is %s while its ADD is held", r.IP, r.State)
		}
		maxMisses = max(maxMisses, r.Obs.Misses)
		if r.Obs.Verdict != "" {
			verdicts[r.Obs.Verdict] = true
		}
		swept := sweeps(t, d) - sweepsAtStart
		return swept >= wantSweeps && maxMisses >= 2 && verdicts["in_flight"],
			fmt.Sprintf("%.0f sweeps since the record appeared, max misses %d, verdicts %v", swept, maxMisses, keysOf(verdicts))
	})
	duringADD := sweeps(t, d) - sweepsAtStart
	n.remove(t, n.HoldAdd)
	var res result
	select {
	case res = <-done:
	case <-time.After(hangGuard):
		t.Fatalf("hung: RunPodSandbox still running %v after its ADD was released", hangGuard)
	}
	took := time.Since(start)
	if res.err != nil {
		t.Fatalf("RunPodSandbox failed: %v\n%s", res.err, d.LogTail(20))
	}
	t.Logf("RunPodSandbox returned after %v; hostlease-gc swept %.0f times while the ADD was held; the record missed up to %d sweeps, verdicts %v",
		took.Round(time.Millisecond), duringADD, maxMisses, keysOf(verdicts))

	st, ips, err := env.PodSandboxStatus(context.Background(), res.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.String() != "SANDBOX_READY" || len(ips) != 1 || ips[0] != rec.IP.String() || res.id != rec.ContainerID {
		t.Fatalf("sandbox %s: %v %v; want READY with the in-flight record's %s", res.id[:12], st.State, ips, rec.IP)
	}
	// Committed by the marker; the next sweeps see it READY and reset its misses.
	waitFor(t, "record committed and seen live", func() (bool, string) {
		recs := n.records(t)
		if len(recs) != 1 {
			return false, describe(recs)
		}
		r := recs[0]
		return r.State == allocator.StateCommitted && r.Obs.Misses == 0 && r.Obs.SandboxState == "READY" && r.Obs.Verdict == "live", describe(recs)
	})
	t.Logf("sandbox %s READY with %s; record committed, misses reset, verdict live", res.id[:12], ips[0])
	for _, ev := range n.audit(t) {
		if ev.Action == "reclaim" {
			t.Errorf("audit log has a reclaim: %+v", ev)
		}
	}
	if r := metric(t, d, "hostlease_reclaims_total"); r != 0 {
		t.Errorf("hostlease_reclaims_total = %v, want 0", r)
	}
	if strings.Contains(d.Log(), "reclaimed address") {
		t.Errorf("hostlease-gc logged a reclaim:\n%s", d.LogTail(20))
	}
}

func countSandboxes(t *testing.T, env *harness.Env) int {
	t.Helper()
	list, err := env.ListPodSandbox(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
