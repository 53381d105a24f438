package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestScenario3InFlightAddNotReclaimed: an ADD that takes longer than many
// sweeps (the failplugin sleeps 8s after IPAM reserved the address) is
// invisible in CRI the whole time, so to hostlease-gc its record looks like a
// leak that has missed every sweep. --min-age (30s here) must keep it: the
// record is never reclaimed while the sandbox is being created, the sandbox
// ends READY with that address, and the record ends committed.
func TestScenario3InFlightAddNotReclaimed(t *testing.T) {
	const delay = 8 * time.Second
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.13.0/24", FailPlugin: true, Marker: true})
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
		"--interval", "1s", "--misses", "2", "--grace", "1s", "--min-age", "30s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
	t.Logf("hostlease-gc sweeping every 1s (misses 2, grace 1s, min-age 30s); the failplugin delays ADD by %v", delay)
	n.touch(t, n.DelayAdd, delay.String())

	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	pod := harness.Pod{Name: "slow-0", Namespace: "scenario3", UID: podUID("slow-0")}
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		id, err := env.RunPodSandbox(ctx, pod)
		done <- result{id, err}
	}()

	sweepsAtStart := sweeps(t, d)
	var (
		rec       *allocator.Record // the in-flight record, once seen
		maxMisses int
		verdicts  = map[string]bool{}
		res       result
	)
poll:
	for {
		select {
		case res = <-done:
			break poll
		case <-time.After(200 * time.Millisecond):
		}
		recs := n.records(t)
		if rec != nil && len(recs) == 0 {
			select {
			case res = <-done: // finished between the two reads?
				if res.err == nil {
					break poll
				}
			default:
			}
			t.Fatalf("the in-flight record %s vanished %v into the ADD (sandbox not created yet)\n%s",
				rec.IP, time.Since(start).Round(time.Millisecond), d.LogTail(20))
		}
		if len(recs) == 1 {
			r := recs[0]
			if rec == nil {
				t.Logf("%v: IPAM reserved %s (state %s); CRI lists %d sandboxes while the chain runs",
					time.Since(start).Round(time.Millisecond), r.IP, r.State, countSandboxes(t, env))
			} else if r.ContainerID != rec.ContainerID || !r.Created.Equal(rec.Created) {
				t.Fatalf("record %s changed owner during the ADD: %s -> %s", r.IP, rec.ContainerID, r.ContainerID)
			}
			rec = r
			if r.State == allocator.StatePending {
				maxMisses = max(maxMisses, r.Obs.Misses)
				if r.Obs.Verdict != "" {
					verdicts[r.Obs.Verdict] = true
				}
			}
		}
		if time.Since(start) > 60*time.Second {
			t.Fatal("RunPodSandbox still running after 60s")
		}
	}
	took := time.Since(start)
	duringADD := sweeps(t, d) - sweepsAtStart
	if res.err != nil {
		t.Fatalf("RunPodSandbox failed: %v\n%s", res.err, d.LogTail(20))
	}
	t.Logf("RunPodSandbox returned after %v; hostlease-gc swept %.0f times meanwhile; the record missed up to %d sweeps, verdicts %v",
		took.Round(time.Millisecond), duringADD, maxMisses, keysOf(verdicts))
	if took < delay {
		t.Fatalf("RunPodSandbox took %v, less than the %v delay: the delay did not apply", took, delay)
	}
	if rec == nil {
		t.Fatal("never saw the record while the ADD was in flight")
	}
	// The policy must have got past misses and grace and been stopped by
	// --min-age alone: that is what this scenario is about.
	if duringADD < 5 || maxMisses < 2 || !verdicts["in_flight"] {
		t.Errorf("during the ADD: %.0f sweeps, max misses %d, verdicts %v; want >= 5 sweeps, >= 2 misses and an in_flight verdict (kept by --min-age)",
			duringADD, maxMisses, keysOf(verdicts))
	}

	st, ips, err := env.PodSandboxStatus(context.Background(), res.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.String() != "SANDBOX_READY" || len(ips) != 1 || ips[0] != rec.IP.String() || res.id != rec.ContainerID {
		t.Fatalf("sandbox %s: %v %v; want READY with the in-flight record's %s", res.id[:12], st.State, ips, rec.IP)
	}
	// Committed by the marker; the next sweeps see it READY and reset its misses.
	waitFor(t, 10*time.Second, "record committed and seen live", func() (bool, string) {
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
