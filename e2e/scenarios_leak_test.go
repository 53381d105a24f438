package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// leakDaemonArgs are the daemon flags of the #12130 story: fast sweeps, two
// misses, short grace and min-age, no mass-reclaim guard (the test pool is a
// /24 and every allocation in it is a leak).
var leakDaemonArgs = []string{"--interval", "1s", "--misses", "2", "--grace", "2s", "--min-age", "5s",
	"--netns-grace", "1s", "--max-reclaim-fraction", "1"}

// leakStoryMetrics are the metrics the story shows.
var leakStoryMetrics = []string{"hostlease_reclaims_total", "hostlease_pool_free_addresses", "hostlease_leak_candidates", "hostlease_sweeps_total"}

// leakStory is what one run of the #12130 story measured.
type leakStory struct {
	IPAM     string
	Attempts int      // failed RunPodSandbox calls
	Leaked   []string // addresses held after the attempts, with no sandbox in CRI
	// PluginReleased: addresses of earlier attempts the plugin released at
	// the next attempt's ADD (audit reason pod_sandbox_replaced), before
	// any daemon ran.
	PluginReleased int
	Listed         int // sandboxes CRI lists after the attempts (and kubelet's cleanup) besides the running pod
	KeptListed     int // attempts whose failed sandbox CRI kept listed until kubelet removed it
	Version        harness.Version
	Reclaimed      int // addresses given back by the end
	Reasons        map[string]int
	TimeToReclaim  time.Duration // hostlease: daemon start -> last reclaim (audit log), measured
	Watched        time.Duration // how long the leaks were watched
	PoolSize       float64
	FreeBefore     float64 // with one healthy pod running, before the chain broke
	FreeLeaked     float64 // after the failed attempts
	FreeAfter      float64 // at the end
	MetricsBefore  []string
	MetricsAfter   []string
	NewPodIP       string // a pod started after the chain was healed
	EnvDir         string // the env's temp dir and bridge, to check the cleanup
	Bridge         string
}

// runLeakStory reproduces containerd #12130 with the given ipam ("host-local"
// or "hostlease") on the conflist [bridge(ipam), failplugin]: the failplugin
// fails ADD and DEL, kubelet retries the pod attempts times, and every
// attempt leaks one address. With hostlease, hostlease-gc then runs with
// leakDaemonArgs and must reclaim all of them within its configured budget;
// with host-local nothing ever gives them back. say narrates.
func runLeakStory(t *testing.T, ipam, subnet string, attempts int, say func(string, ...any)) *leakStory {
	t.Helper()
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{IPAM: ipam, Subnet: subnet, FailPlugin: true})
	s := &leakStory{IPAM: ipam, Attempts: attempts, Reasons: map[string]int{}, EnvDir: env.Dir, Bridge: n.Bridge, Version: env.Version}
	say("containerd %s, conflist [bridge(ipam: %s), failplugin] network %s subnet %s", env.Version, ipam, n.Network, subnet)

	// A healthy pod first, and it keeps running, as pods do on a node: the
	// chain works, the pool's starting point, and a netns in the runtime's
	// netns dir (a daemon may trust a missing netns as proof of death only
	// where the runtime's live netns are seen).
	liveID, liveIP := n.runPod(t, harness.Pod{Name: "web-0", Namespace: "demo", UID: podUID("web-0")})
	// held is what the IPAM holds besides the running pod.
	held := func() []string {
		var all []string
		if ipam == "host-local" {
			all = keys(n.hostLocalLeases(t))
		} else {
			all = ipsOf(n.records(t))
		}
		var out []string
		for _, ip := range all {
			if ip != liveIP {
				out = append(out, ip)
			}
		}
		return out
	}
	free := func() float64 {
		if ipam == "host-local" {
			return s.PoolSize - 1 - float64(len(held()))
		}
		return n.pool(t).Free
	}
	if ipam == "host-local" {
		s.PoolSize = 253 // 10.99.x.1-254 without the gateway .1, as host-local counts it
	} else {
		p := n.pool(t)
		s.PoolSize = p.Size
	}
	s.FreeBefore = free()
	say("healthy pod demo/web-0 running with %s: pool %.0f addresses, %.0f free", liveIP, s.PoolSize, s.FreeBefore)

	// The chain breaks: ADD and DEL of the last plugin fail. kubelet retries
	// the same pod (same name and UID, a new attempt number each time).
	n.breakChain(t)
	pod := harness.Pod{Name: "api-7f9c", Namespace: "demo", UID: podUID("api-7f9c")}
	for i := 0; i < attempts; i++ {
		pod.Attempt = uint32(i)
		start := time.Now()
		listed := n.failPod(t, pod, "failplugin: ADD failing on purpose")
		if len(listed) > 0 {
			s.KeptListed++
			say("attempt %d: RunPodSandbox failed after %v; containerd kept the failed sandbox listed (%s) until kubelet stopped and removed it; addresses held: %v",
				i+1, time.Since(start).Round(time.Millisecond), describeSandboxes(listed), held())
		} else {
			say("attempt %d: RunPodSandbox failed after %v; addresses held: %v", i+1, time.Since(start).Round(time.Millisecond), held())
		}
	}
	s.Leaked = held()
	list, err := env.ListPodSandbox(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.Id != liveID {
			s.Listed++
		}
	}
	s.FreeLeaked = free()
	say("after %d failed attempts: %d more addresses held (%s), CRI lists %d sandboxes besides web-0, pool free %.0f",
		attempts, len(s.Leaked), strings.Join(s.Leaked, " "), s.Listed, s.FreeLeaked)

	if ipam == "host-local" {
		// Nothing in host-local (or containerd) will ever give them back.
		s.Watched = 5 * time.Second
		time.Sleep(s.Watched)
		s.Reclaimed = len(s.Leaked) - len(held())
		s.FreeAfter = free()
		say("%v later: host-local still holds %v (files under %s/%s)", s.Watched, held(), n.DataDir, n.Network)
		return s
	}

	// Each attempt's ADD released the previous attempt's address: containerd
	// had torn its netns down (the plugin's own proof; no daemon runs yet).
	for _, ev := range n.audit(t) {
		if allocator.IsPluginRelease(ev) && ev.Reason == allocator.ReasonPodSandboxReplaced && ev.PodUID == pod.UID {
			s.PluginReleased++
		}
	}
	say("the plugin released %d earlier attempts' addresses at the next attempt's ADD (audit: %s)", s.PluginReleased, allocator.ReasonPodSandboxReplaced)

	// The leaked records are pending (the chain never completed), name the
	// pod from the CRI metadata, and their sandboxes are gone from CRI.
	var leakedRecs []*allocator.Record
	for _, r := range n.records(t) {
		if r.ContainerID != liveID {
			leakedRecs = append(leakedRecs, r)
		}
	}
	for _, r := range leakedRecs {
		if r.State != "pending" || r.PodName != pod.Name || r.PodNamespace != pod.Namespace || r.PodUID != pod.UID {
			t.Errorf("leaked record %s: state %s pod %s/%s uid %s; want pending for %s/%s uid %s",
				r.IP, r.State, r.PodNamespace, r.PodName, r.PodUID, pod.Namespace, pod.Name, pod.UID)
		}
	}

	// What an operator sees.
	say("$ hostlease-gc list\n%s", cliTable(t, env, "list", "--data-dir", n.DataDir))
	say("$ hostlease-gc status\n%s", cliTable(t, env, "status", "--data-dir", n.DataDir))

	// hostlease-gc: the leaked records are pending, their sandboxes are gone
	// from CRI and their netns removed.
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: leakDaemonArgs})
	s.MetricsBefore = metrics(t, d).Lines(leakStoryMetrics...)
	say("hostlease-gc run %s", strings.Join(leakDaemonArgs, " "))
	// The audit log is the truth: it is written in the transaction that
	// frees the addresses. The deadline is a hang guard, not a budget.
	evs := n.waitReclaims(t, len(s.Leaked), func() string {
		return fmt.Sprintf("still held: %v\n%s", held(), d.LogTail(10))
	})
	leakedBy := map[string]string{} // sandbox ID -> leaked address
	for _, r := range leakedRecs {
		leakedBy[r.ContainerID] = r.IP.String()
	}
	var last time.Time
	for _, ev := range evs {
		s.Reclaimed++
		s.Reasons[auditReason(ev)]++
		if ev.Time.After(last) {
			last = ev.Time
		}
		// Order: each reclaim is of a leaked sandbox's own address, and
		// comes after the daemon started.
		if leakedBy[ev.ContainerID] != ev.IP.String() {
			t.Errorf("reclaimed %s from sandbox %.12s, which is not one of the leaks %v", ev.IP, ev.ContainerID, leakedBy)
		}
		if ev.Time.Before(d.Started()) {
			t.Errorf("reclaim of %s at %v, before hostlease-gc started at %v", ev.IP, ev.Time, d.Started())
		}
	}
	s.TimeToReclaim = last.Sub(d.Started())
	// The daemon logs each reclaim after its store write: wait for the lines.
	for _, ev := range waitEvents(t, d, "reclaimed address", len(evs)) {
		detail, _, _ := strings.Cut(fmt.Sprint(ev["detail"]), "; netns ")
		say("hostlease-gc: reclaimed %v from sandbox %.12s (pod %v): %v: %s", ev["ip"], ev["sandbox"], ev["pod"], ev["reason"], detail)
	}
	say("all %d reclaimed %v after hostlease-gc started", s.Reclaimed, s.TimeToReclaim.Round(time.Millisecond))

	// The metrics catch up at the end of the reclaiming sweep.
	m := waitMetrics(t, d, "metrics show the reclaims", func(m harness.MetricSet) bool {
		r, _ := m.Sum("hostlease_reclaims_total", "network", n.Network)
		f, _ := m.Sum("hostlease_pool_free_addresses", "network", n.Network)
		c, _ := m.Sum("hostlease_leak_candidates", "network", n.Network)
		return r == float64(len(s.Leaked)) && f == s.FreeBefore && c == 0
	})
	s.MetricsAfter = m.Lines(leakStoryMetrics...)
	s.FreeAfter = free()
	say("$ hostlease-gc status\n%s", cliTable(t, env, "status", "--data-dir", n.DataDir))

	// The running pod kept its address throughout.
	if r := byIP(n.records(t))[liveIP]; r == nil || r.ContainerID != liveID {
		t.Errorf("the running pod's %s is no longer held by its sandbox: %s", liveIP, describe(n.records(t)))
	}
	// The pool works: with the chain healed, the next pod gets an address.
	n.healChain(t)
	pod.Attempt++
	_, s.NewPodIP = n.runPod(t, pod)
	say("chain healed: attempt %d of the pod runs with %s", pod.Attempt+1, s.NewPodIP)
	return s
}

// TestScenario2LeakReclaimed: containerd #12130 leaks one address per
// kubelet retry with host-local, which keeps the leaked files forever. With
// hostlease the pod holds at most one: each retry's ADD releases the previous
// attempt's address (containerd tore its netns down: the plugin's proof),
// and hostlease-gc reclaims the last one within its configured misses and
// grace; the pool returns to its starting size and the metrics show it.
func TestScenario2LeakReclaimed(t *testing.T) {
	const attempts = 4
	var hl, hs *leakStory
	checkKept := func(t *testing.T, s *leakStory) {
		t.Helper()
		want := 0
		if factsFor(s.Version).FailedSandboxListed {
			want = attempts
		}
		if s.KeptListed != want {
			t.Errorf("containerd %s kept %d of %d failed sandboxes listed; want %d", s.Version, s.KeptListed, attempts, want)
		}
	}
	t.Run("host-local", func(t *testing.T) {
		fullSuiteOnly(t) // TestEnvChainFailAddAndDel measures host-local's leaks on every version
		hl = runLeakStory(t, "host-local", "10.99.11.0/24", attempts, t.Logf)
		checkKept(t, hl)
		if len(hl.Leaked) != attempts || hl.Listed != 0 {
			t.Errorf("host-local: %d addresses leaked with %d sandboxes listed; want %d leaks and no sandbox (#12130)", len(hl.Leaked), hl.Listed, attempts)
		}
		if hl.Reclaimed != 0 {
			t.Errorf("host-local gave back %d addresses; nothing should", hl.Reclaimed)
		}
	})
	t.Run("hostlease", func(t *testing.T) {
		hs = runLeakStory(t, "hostlease", "10.99.12.0/24", attempts, t.Logf)
		checkKept(t, hs)
		// The runtime's leak is healed at the source: one address held for
		// the pod, the earlier ones released by the plugin.
		if len(hs.Leaked) != 1 || hs.Listed != 0 || hs.PluginReleased != attempts-1 {
			t.Errorf("hostlease: %d addresses leaked with %d sandboxes listed, %d released by the plugin; want 1 leak (the last attempt's), %d released by the plugin",
				len(hs.Leaked), hs.Listed, hs.PluginReleased, attempts-1)
		}
		if hs.Reclaimed != 1 {
			t.Errorf("the audit log holds %d reclaims, want 1 (the last attempt's)", hs.Reclaimed)
		}
		if hs.FreeAfter != hs.FreeBefore || hs.FreeLeaked != hs.FreeBefore-1 {
			t.Errorf("pool free before %.0f, leaked %.0f, after %.0f; want one held, then back to the start", hs.FreeBefore, hs.FreeLeaked, hs.FreeAfter)
		}
		// The failed sandbox's netns was removed by containerd: the daemon
		// can prove the teardown and need not wait for --min-age.
		if hs.Reasons["netns_gone"] != 1 {
			t.Errorf("reclaim reasons %v; want all netns_gone (containerd removed the netns)", hs.Reasons)
		}
		t.Logf("metrics before the reclaim:\n      %s\nafter:\n      %s", strings.Join(hs.MetricsBefore, "\n      "), strings.Join(hs.MetricsAfter, "\n      "))
	})
	if hl != nil && hs != nil {
		t.Logf("\n%s", leakTable(hl, hs))
	}
}

// leakTable is the before/after table of the two runs.
func leakTable(hl, hs *leakStory) string {
	never := func(s *leakStory) string {
		if s.Reclaimed == 0 {
			return fmt.Sprintf("never (watched %v)", s.Watched)
		}
		return s.TimeToReclaim.Round(10 * time.Millisecond).String()
	}
	reasons := func(s *leakStory) string {
		var parts []string
		for r, c := range s.Reasons {
			parts = append(parts, fmt.Sprintf("%s=%d", r, c))
		}
		sort.Strings(parts)
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, " ")
	}
	rows := [][3]string{
		{"one pod, kubelet retrying (containerd " + hs.Version.String() + ")", "host-local", "hostlease + hostlease-gc"},
		{"failed RunPodSandbox (kubelet retries)", fmt.Sprint(hl.Attempts), fmt.Sprint(hs.Attempts)},
		{"failed sandboxes kept listed until removed", fmt.Sprint(hl.KeptListed), fmt.Sprint(hs.KeptListed)},
		{"sandboxes CRI lists afterwards", fmt.Sprint(hl.Listed), fmt.Sprint(hs.Listed)},
		{"released by the plugin (next retry's ADD)", "-", fmt.Sprint(hs.PluginReleased)},
		{"addresses leaked", fmt.Sprint(len(hl.Leaked)), fmt.Sprint(len(hs.Leaked))},
		{"addresses reclaimed", fmt.Sprint(hl.Reclaimed), fmt.Sprint(hs.Reclaimed)},
		{"reclaim reason", "-", reasons(hs)},
		{"time to reclaim (daemon start -> last)", never(hl), never(hs)},
		{"pool free before the leaks", fmt.Sprintf("%.0f / %.0f", hl.FreeBefore, hl.PoolSize), fmt.Sprintf("%.0f / %.0f", hs.FreeBefore, hs.PoolSize)},
		{"pool free after the leaks", fmt.Sprintf("%.0f", hl.FreeLeaked), fmt.Sprintf("%.0f", hs.FreeLeaked)},
		{"pool free at the end", fmt.Sprintf("%.0f", hl.FreeAfter), fmt.Sprintf("%.0f", hs.FreeAfter)},
	}
	var b strings.Builder
	for i, r := range rows {
		fmt.Fprintf(&b, "  %-46s %-22s %s\n", r[0], r[1], r[2])
		if i == 0 {
			fmt.Fprintf(&b, "  %s\n", strings.Repeat("-", 94))
		}
	}
	return b.String()
}

// cliTable runs a hostlease-gc command and indents its table output.
func cliTable(t *testing.T, env *harness.Env, args ...string) string {
	t.Helper()
	out, err := env.GC(args...)
	if err != nil {
		t.Fatal(err)
	}
	return "      " + strings.ReplaceAll(strings.TrimRight(string(out), "\n"), "\n", "\n      ")
}
