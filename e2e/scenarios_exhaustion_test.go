package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
)

// TestScenario6Exhaustion: a 3-address pool filled by #12130 leaks.
//   - containerd 2.1.4 runs CNI STATUS only inside the CRI Status call (no
//     polling of its own; kubelet calls Status every 5s), so NetworkReady
//     follows the pool at the very next Status call: false while exhausted
//     with the default failStatusOnExhaustion, true with it set to false;
//   - the next RunPodSandbox fails with hostlease's exhaustion error, which
//     touches <dataDir>/.kick; hostlease-gc running with --interval 1h sweeps
//     at once, reclaims the leaks, and a kubelet-style retry succeeds;
//   - hostlease_allocation_failures_total{reason="exhausted"} and
//     hostlease_pool_free_addresses show it.
func TestScenario6Exhaustion(t *testing.T) {
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.17.0/29", RangeStart: "10.99.17.2", RangeEnd: "10.99.17.4", FailPlugin: true, Marker: true})
	ctx := context.Background()

	// 1. Does containerd call STATUS by itself? Count the failplugin's STATUS
	// calls (it runs after bridge -> hostlease STATUS succeeded) over a quiet
	// window, then across one CRI Status call.
	quiet := 3 * time.Second
	before := n.failCalls(t)["STATUS"]
	time.Sleep(quiet)
	idle := n.failCalls(t)["STATUS"] - before
	if _, _, err := env.Status(ctx); err != nil {
		t.Fatal(err)
	}
	perCall := n.failCalls(t)["STATUS"] - before - idle
	t.Logf("CNI STATUS calls: %d in %v without CRI Status calls, %d for one CRI Status call", idle, quiet, perCall)
	if idle != 0 || perCall != 1 {
		t.Errorf("want 0 STATUS calls while nobody calls CRI Status and exactly 1 per Status call (containerd 2.1.4 does not poll)")
	}

	// 2. Fill the pool with leaks.
	n.breakChain(t)
	pod := harness.Pod{Name: "full-0", Namespace: "scenario6", UID: podUID("full-0")}
	for i := 0; i < 3; i++ {
		pod.Attempt = uint32(i)
		n.failPod(t, pod, "failplugin: ADD failing on purpose")
	}
	filled := time.Now()
	if p := n.pool(t); p.Size != 3 || p.Free != 0 || p.Pending != 3 {
		t.Fatalf("after 3 leaks: %+v; want size 3, free 0, 3 pending", p)
	}
	t.Logf("3 leaks fill the pool %s: %v", n.pool(t).Ranges, ipsOf(n.records(t)))

	// 3. NetworkReady=false at the very next Status call: the STATUS verb
	// runs inside it, so the latency is that one call.
	callStart := time.Now()
	cond, _, err := env.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first CRI Status after the pool filled (the call took %v): NetworkReady=%v reason %q message %q",
		time.Since(callStart).Round(time.Millisecond), cond.Status, cond.Reason, cond.Message)
	if cond.Status || !strings.Contains(cond.Message, "no free address") {
		t.Errorf("NetworkReady=%v %q; want false naming the exhausted range set", cond.Status, cond.Message)
	}

	// 4. With "failStatusOnExhaustion": false the node stays Ready while the
	// pool is still exhausted; then back to the default.
	n.Opts.FailStatusOnExhaustion = ptr(false)
	env.WriteConflist(n.File, n.conflist())
	took := waitStatus(t, env, true, "failStatusOnExhaustion")
	if p := n.pool(t); p.Free != 0 {
		t.Fatalf("pool changed while flipping the config: %+v", p)
	}
	t.Logf("failStatusOnExhaustion=false loaded after %v: NetworkReady=true although the pool has 0 free", took.Round(time.Millisecond))
	n.Opts.FailStatusOnExhaustion = nil
	env.WriteConflist(n.File, n.conflist())
	took = waitStatus(t, env, false, "")
	t.Logf("default config loaded again after %v: NetworkReady=false", took.Round(time.Millisecond))

	// 5. hostlease-gc with a 1h interval: only the start sweep, then nothing
	// until a kick. The chain is healed, so the only problem left is the pool.
	n.healChain(t)
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
		"--interval", "1h", "--misses", "2", "--grace", "1s", "--min-age", "1s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
	time.Sleep(1500 * time.Millisecond) // past --grace since the start sweep's first miss
	m := metrics(t, d)
	free0, _ := m.Sum("hostlease_pool_free_addresses", "network", n.Network)
	cand0, _ := m.Sum("hostlease_leak_candidates", "network", n.Network)
	sw0 := sweeps(t, d)
	if p := n.pool(t); p.Free != 0 || sw0 != 1 || free0 != 0 || cand0 != 3 {
		t.Fatalf("before the kick: pool %+v, %v sweeps, metrics free %v candidates %v; want 1 sweep that reclaimed nothing (misses 2)", p, sw0, free0, cand0)
	}
	t.Logf("hostlease-gc --interval 1h: start sweep saw 3 leak candidates; %v later still nothing reclaimed (pool free %v)", 1500*time.Millisecond, free0)

	// 6. The next attempt fails for exhaustion and kicks the daemon.
	pod.Attempt++
	n.failPod(t, pod, "no IP addresses available in range set")
	failedAt := time.Now()
	fi, err := os.Stat(filepath.Join(n.DataDir, ".kick"))
	if err != nil {
		t.Fatalf("the exhaustion did not touch the kick file: %v", err)
	}
	kickAt := fi.ModTime()
	t.Logf("attempt %d: RunPodSandbox failed with hostlease's exhaustion error; .kick touched", pod.Attempt+1)
	waitFor(t, 10*time.Second, "kick sweep reclaimed the pool", func() (bool, string) {
		return n.pool(t).Free == 3, describe(n.records(t))
	})
	ev := d.Events("reclaimed address")
	if len(ev) != 3 {
		t.Fatalf("reclaims logged: %d, want 3", len(ev))
	}
	kickToReclaim := harness.EventTime(ev[len(ev)-1]).Sub(kickAt)
	t.Logf("kick -> reclaim: %v (the daemon polls the kick file every 1s)", kickToReclaim.Round(time.Millisecond))
	if kickToReclaim > 3*time.Second {
		t.Errorf("kick to reclaim took %v; want within the 1s kick poll plus one sweep", kickToReclaim)
	}

	// 7. NetworkReady follows at the next Status call.
	callStart = time.Now()
	cond, _, err = env.Status(ctx)
	if err != nil || !cond.Status {
		t.Errorf("after the reclaim: NetworkReady=%v %q (%v); want true", cond.GetStatus(), cond.GetMessage(), err)
	} else {
		t.Logf("first CRI Status after the reclaim (the call took %v): NetworkReady=true", time.Since(callStart).Round(time.Millisecond))
	}

	// 8. kubelet retries with backoff; the retry succeeds.
	pod.Attempt++
	var id, ip string
	waitFor(t, 10*time.Second, "a kubelet-style retry succeeds", func() (bool, string) {
		sid, err := env.RunPodSandbox(ctx, pod)
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			pod.Attempt++
			return false, err.Error()
		}
		id = sid
		_, ips, _ := env.PodSandboxStatus(ctx, sid)
		ip = strings.Join(ips, ",")
		return true, ""
	})
	t.Logf("retry (attempt %d) READY with %s, %v after the exhaustion failure", pod.Attempt+1, ip, time.Since(failedAt).Round(time.Millisecond))
	_ = id

	// 9. Metrics of the kick sweep.
	m = metrics(t, d)
	fails, _ := m.Sum("hostlease_allocation_failures_total", "network", n.Network, "reason", "exhausted")
	free1, _ := m.Sum("hostlease_pool_free_addresses", "network", n.Network)
	last, _ := m.Sum("hostlease_last_exhaustion_timestamp_seconds", "network", n.Network)
	rec, _ := m.Sum("hostlease_reclaims_total", "network", n.Network)
	sw1 := sweeps(t, d)
	t.Logf("metrics:\n      %s", strings.Join(m.Lines("hostlease_allocation_failures_total", "hostlease_pool_free_addresses",
		"hostlease_last_exhaustion_timestamp_seconds", "hostlease_reclaims_total", "hostlease_sweeps_total"), "\n      "))
	if fails != 1 || free1 != 3 || rec != 3 || sw1 != 2 || last < float64(filled.Unix()) {
		t.Errorf("metrics: exhausted failures %v, pool free %v, reclaims %v, sweeps %v, last exhaustion %v; want 1, 3, 3, 2 (start + kick), a recent time",
			fails, free1, rec, sw1, last)
	}
}

// waitStatus polls CRI Status until NetworkReady is ready and, when contains
// is set, the loaded CNI config contains it (or, for ready == false, until
// the loaded config no longer contains the previous marker). It returns how
// long that took.
func waitStatus(t *testing.T, env *harness.Env, ready bool, contains string) time.Duration {
	t.Helper()
	return waitFor(t, 30*time.Second, "NetworkReady change", func() (bool, string) {
		cond, info, err := env.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		loaded := contains == "" || strings.Contains(info["cniconfig"], contains)
		return cond.Status == ready && loaded, cond.Message
	})
}
