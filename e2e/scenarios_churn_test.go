package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestScenario4LivePodsUnderChurn: three healthy pods run while the chain
// breaks and failing pods churn (every attempt leaks an address), with
// hostlease-gc sweeping every second and reclaiming as fast as its flags
// allow. No live pod's address is ever reclaimed or handed to another
// sandbox; every leak is reclaimed exactly once; the audit log holds only
// the leaked sandboxes.
func TestScenario4LivePodsUnderChurn(t *testing.T) {
	const (
		livePods  = 3
		churnFor  = 8 * time.Second
		churnPods = 3
	)
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.14.0/24", FailPlugin: true, Marker: true})

	live := map[string]string{} // sandbox ID -> IP
	liveIP := map[string]string{}
	for i := 0; i < livePods; i++ {
		name := fmt.Sprintf("live-%d", i)
		id, ip := n.runPod(t, harness.Pod{Name: name, Namespace: "scenario4", UID: podUID(name)})
		live[id], liveIP[ip] = ip, id
	}
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
		"--interval", "1s", "--misses", "2", "--grace", "1s", "--min-age", "2s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
	t.Logf("hostlease-gc sweeping every 1s (misses 2, grace 1s, min-age 2s, netns-grace 1s)")

	// checkLive fails the test if a live pod's record is gone, changed, or
	// if its address is held by anything else.
	samples := 0
	checkLive := func(when string) {
		t.Helper()
		recs := byIP(n.records(t))
		samples++
		for id, ip := range live {
			r := recs[ip]
			switch {
			case r == nil:
				t.Fatalf("%s: live pod %s's address %s is gone from the store\n%s", when, id[:12], ip, d.LogTail(20))
			case r.ContainerID != id:
				t.Fatalf("%s: live pod %s's address %s now belongs to sandbox %s", when, id[:12], ip, r.ContainerID[:12])
			case r.State != allocator.StateCommitted:
				t.Fatalf("%s: live pod %s's record is %s", when, id[:12], r.State)
			}
		}
	}
	checkLive("before the churn")

	n.breakChain(t)
	t.Logf("chain broken (failplugin fails ADD and DEL); churning failing pods for %v", churnFor)
	start := time.Now()
	attempts := 0
	maxHeld := 0
	for time.Since(start) < churnFor {
		p := harness.Pod{Namespace: "scenario4"}
		p.Name = fmt.Sprintf("churn-%d", attempts%churnPods)
		p.UID, p.Attempt = podUID(p.Name), uint32(attempts/churnPods)
		n.failPod(t, p, "failplugin: ADD failing on purpose")
		attempts++
		checkLive(fmt.Sprintf("after churn attempt %d", attempts))
		maxHeld = max(maxHeld, len(n.records(t))-livePods)
		time.Sleep(150 * time.Millisecond)
	}
	t.Logf("%d failing attempts in %v; at most %d leaked addresses held at once; %.0f sweeps so far",
		attempts, time.Since(start).Round(time.Millisecond), maxHeld, sweeps(t, d))

	took := waitFor(t, "every leak reclaimed", func() (bool, string) {
		checkLive("while the leaks drain")
		recs := n.records(t)
		return len(recs) == livePods, describe(recs)
	})
	t.Logf("remaining leaks reclaimed %v after the churn stopped; live pods checked %d times", took.Round(time.Millisecond), samples)

	// Audit: one release per failed attempt, each of a leaked sandbox, none
	// of a live address: the daemon's reclaim, or the plugin's at the pod's
	// next attempt (its netns torn down: pod_sandbox_replaced).
	failed := map[string]bool{}
	for _, id := range n.failedAddIDs(t) {
		failed[id] = true
	}
	reclaimedIDs := map[string]int{}
	byPlugin := 0
	for _, ev := range n.audit(t) {
		plugin := allocator.IsPluginRelease(ev)
		if ev.Action != "reclaim" && !plugin {
			continue
		}
		if plugin {
			byPlugin++
		}
		reclaimedIDs[ev.ContainerID]++
		if !failed[ev.ContainerID] || liveIP[ev.IP.String()] != "" {
			t.Errorf("audit: %s of %s from sandbox %.12s, which is not a leaked sandbox (or a live address)", ev.Action, ev.IP, ev.ContainerID)
		}
	}
	if len(failed) != attempts || len(reclaimedIDs) != attempts {
		t.Errorf("%d attempts, %d failed ADDs logged, %d sandboxes released; want all equal", attempts, len(failed), len(reclaimedIDs))
	}
	for id, c := range reclaimedIDs {
		if c != 1 {
			t.Errorf("sandbox %.12s released %d times", id, c)
		}
	}
	// The metrics are updated at the end of the sweep that wrote the store.
	m := waitMetrics(t, d, "metrics show every release", func(m harness.MetricSet) bool {
		rec, _ := m.Sum("hostlease_reclaims_total", "network", n.Network)
		plug, _ := m.Sum("hostlease_plugin_releases_total", "network", n.Network)
		committed, _ := m.Sum("hostlease_allocations", "network", n.Network, "state", "committed")
		return rec == float64(attempts-byPlugin) && plug == float64(byPlugin) && committed == livePods
	})
	rec, _ := m.Sum("hostlease_reclaims_total", "network", n.Network)
	if vetoes, _ := m.Sum("hostlease_vetoes_total", "network", n.Network); vetoes != 0 {
		t.Errorf("hostlease_vetoes_total %v; want 0", vetoes)
	}
	t.Logf("audit log: %d releases, all of leaked sandboxes (%d by the plugin at the pod's next attempt); hostlease_reclaims_total %v", len(reclaimedIDs), byPlugin, rec)

	// CRI agrees: the live pods are READY with their addresses.
	for id, ip := range live {
		st, ips, err := env.PodSandboxStatus(context.Background(), id)
		if err != nil || st.State.String() != "SANDBOX_READY" || len(ips) != 1 || ips[0] != ip {
			t.Errorf("live pod %s: %v %v %v; want READY with %s", id[:12], st.GetState(), ips, err, ip)
		}
	}
	// And a new pod after the chain heals gets an address no live pod has.
	n.healChain(t)
	_, ip := n.runPod(t, harness.Pod{Name: "after", Namespace: "scenario4", UID: podUID("after")})
	if liveIP[ip] != "" {
		t.Errorf("new pod got %s, the address of live pod %s", ip, liveIP[ip][:12])
	}
	checkLive("at the end")
}
