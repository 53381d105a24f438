package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// TestScenario7Restarts: hostlease-gc and containerd restart in the middle of
// a leak's grace period (hostlease-gc stopped while containerd restarts; then
// containerd down for several sweeps while hostlease-gc runs). Nothing is
// lost: the live pods' records stay committed with their addresses and CRI
// still shows them READY; nothing is reclaimed while CRI cannot be asked,
// or before the grace has passed; the leaks are still reclaimed afterwards.
func TestScenario7Restarts(t *testing.T) {
	const grace = 8 * time.Second
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.18.0/24", FailPlugin: true, Marker: true})
	ctx := context.Background()

	live := map[string]string{} // sandbox ID -> IP
	for _, name := range []string{"db-0", "db-1"} {
		id, ip := n.runPod(t, harness.Pod{Name: name, Namespace: "scenario7", UID: podUID(name)})
		live[id] = ip
	}
	n.breakChain(t)
	// Two pods, one failed attempt each: a pod's next attempt would release
	// its previous one itself (the plugin's per-pod release).
	for _, name := range []string{"gone-0", "gone-1"} {
		n.failPod(t, harness.Pod{Name: name, Namespace: "scenario7", UID: podUID(name)}, "failplugin: ADD failing on purpose")
	}
	n.healChain(t)
	leaks := map[string]bool{}
	for _, r := range n.records(t) {
		if _, ok := live[r.ContainerID]; !ok {
			leaks[r.IP.String()] = true
		}
	}
	if len(leaks) != 2 {
		t.Fatalf("want 2 leaked records, have %s", describe(n.records(t)))
	}
	var liveIPs []string
	for _, ip := range live {
		liveIPs = append(liveIPs, ip)
	}
	t.Logf("2 live pods %v and 2 leaks %v", liveIPs, keysOf(leaks))

	// checkLive: the live records are there, unchanged and committed.
	checkLive := func(when string) {
		t.Helper()
		recs := byIP(n.records(t))
		for id, ip := range live {
			if r := recs[ip]; r == nil || r.ContainerID != id || r.State != allocator.StateCommitted {
				t.Fatalf("%s: live pod %s's record for %s is %v", when, id[:12], ip, describe([]*allocator.Record{r}))
			}
		}
	}
	// leakMisses: the leaks' miss counters (fails if one is gone).
	leakMisses := func(when string) []int {
		t.Helper()
		recs := byIP(n.records(t))
		var out []int
		for ip := range leaks {
			r := recs[ip]
			if r == nil {
				t.Fatalf("%s: leak %s reclaimed before its %v grace\n%s", when, ip, grace, strings.Join(reclaimLines(env, n), "\n"))
			}
			out = append(out, r.Obs.Misses)
		}
		return out
	}

	// No view of the pods' netns: the leaks have no proof of teardown and
	// wait for --misses, --grace and --min-age (a reclaim with proof would not
	// wait for the restarts at all).
	args := []string{"--interval", "1s", "--misses", "3", "--grace", grace.String(), "--min-age", "5s",
		"--netns-grace", grace.String(), "--max-reclaim-fraction", "1", "--netns-dir", hiddenNetnsDir(t, env)}
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: args})
	// The first miss is counted by the start sweep, after the process started.
	firstSweep := d.Started()
	t.Logf("hostlease-gc %s", strings.Join(args, " "))
	waitFor(t, "the daemon has seen the leaks", func() (bool, string) {
		m := leakMisses("first sweeps")
		return m[0] >= 1 && m[1] >= 1, fmt.Sprint(m)
	})
	checkLive("after the first sweep")
	m1 := leakMisses("before the restarts")

	// hostlease-gc down while containerd restarts.
	d.Stop()
	start := time.Now()
	env.Restart()
	env.WaitNetworkReady(n.Network, hangGuard)
	t.Logf("hostlease-gc stopped (leak misses %v); containerd restarted in %v", m1, time.Since(start).Round(time.Millisecond))
	for id, ip := range live {
		st, ips, err := env.PodSandboxStatus(ctx, id)
		if err != nil || st.State.String() != "SANDBOX_READY" || len(ips) != 1 || ips[0] != ip {
			t.Fatalf("after the containerd restart pod %s: %v %v %v; want READY with %s", id[:12], st.GetState(), ips, err, ip)
		}
	}
	d.Start()
	checkLive("after the daemon restart")
	m2 := leakMisses("after the daemon restart")
	t.Logf("hostlease-gc restarted: leak misses %v (carried over in the store, not reset)", m2)
	for i := range m2 {
		if m2[i] < m1[i] {
			t.Errorf("leak misses went from %v to %v across the daemon restart", m1, m2)
		}
	}

	// containerd down for several sweeps while hostlease-gc runs.
	criErrors0 := metric(t, d, "hostlease_sweeps_total", "result", "cri_error")
	env.Kill()
	outageStart := time.Now()
	var criErrors float64
	// containerd stays down until the daemon has failed to list CRI in two
	// sweeps and said it reclaims nothing (the deadline is a hang guard).
	waitFor(t, "two cri_error sweeps while containerd is down", func() (bool, string) {
		checkLive("during the containerd outage")
		leakMisses("during the containerd outage")
		criErrors = metric(t, d, "hostlease_sweeps_total", "result", "cri_error") - criErrors0
		said := strings.Contains(d.Log(), "reclaiming nothing this sweep")
		return criErrors >= 2 && said, fmt.Sprintf("%.0f cri_error sweeps, 'reclaiming nothing' logged: %v", criErrors, said)
	})
	checkLive("during the containerd outage")
	m3 := leakMisses("during the containerd outage")
	t.Logf("containerd down for %v: %.0f sweeps failed to list CRI and reclaimed nothing; leak misses %v",
		time.Since(outageStart).Round(time.Millisecond), criErrors, m3)
	env.Start()
	env.WaitNetworkReady(n.Network, hangGuard)

	// The leaks are still reclaimed, not before the grace, and nothing else is.
	took := waitFor(t, "the leaks reclaimed after the restarts", func() (bool, string) {
		checkLive("while waiting for the reclaims")
		recs := n.records(t)
		return len(recs) == len(live), describe(recs)
	})
	evs := n.reclaims(t)
	if len(evs) != len(leaks) {
		t.Errorf("audit log has %d reclaims; want %d (the leaks)", len(evs), len(leaks))
	}
	for _, ev := range evs {
		// Order: no reclaim before the grace counted from the first miss.
		if sinceFirst := ev.Time.Sub(firstSweep); sinceFirst < grace {
			t.Errorf("reclaimed %s %v after the daemon first started, before the %v grace", ev.IP, sinceFirst, grace)
		}
	}
	t.Logf("leaks reclaimed %v after containerd came back (grace %v; audit: %s)", took.Round(time.Millisecond), grace, strings.Join(reclaimLines(env, n), "; "))
	for _, ev := range n.audit(t) {
		if ev.Action == "reclaim" && !leaks[ev.IP.String()] {
			t.Errorf("audit: reclaimed %s, which is not a leak", ev.IP)
		}
	}
	for id, ip := range live {
		st, ips, err := env.PodSandboxStatus(ctx, id)
		if err != nil || st.State.String() != "SANDBOX_READY" || len(ips) != 1 || ips[0] != ip {
			t.Errorf("at the end pod %s: %v %v %v; want READY with %s", id[:12], st.GetState(), ips, err, ip)
		}
	}
	for id := range live {
		n.stopRemove(t, id)
	}
	if recs := n.records(t); len(recs) != 0 {
		t.Errorf("after removing the live pods the store holds %s", describe(recs))
	}
	t.Logf("live pods removed: their records released by DEL, store empty")
}

// reclaimLines returns the audit log's reclaims, for failure messages.
func reclaimLines(env *harness.Env, n *testNet) []string {
	_ = env
	var out []string
	s, err := store.Open(n.StorePath(), store.OpenOptions{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		return []string{err.Error()}
	}
	defer s.Close()
	_ = s.View(func(tx *store.Tx) error {
		evs, err := tx.AuditLog(100)
		for _, ev := range evs {
			out = append(out, fmt.Sprintf("%s %s %s %s", ev.Time.Format(time.RFC3339Nano), ev.Action, ev.IP, ev.Reason))
		}
		return err
	})
	return out
}
