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
//   - containerd 2.x runs CNI STATUS only inside the CRI Status call (no
//     polling of its own; kubelet calls Status every 5s), so NetworkReady
//     follows the pool at the very next Status call: false while exhausted
//     with failStatusOnExhaustion true, true with it false; 1.x never calls
//     STATUS and stays Ready;
//   - hostlease-gc runs with --interval 1h and without a view of the pods'
//     netns (no proof of teardown), so after its start sweep the leaks wait
//     for a second sweep (--misses 2);
//   - the next RunPodSandbox fails with hostlease's exhaustion error, which
//     touches <dataDir>/.kick; hostlease-gc sweeps at once, reclaims the
//     leaks, and a kubelet-style retry succeeds. Asserted as an order of
//     events: one sweep and nothing reclaimed before the kick, the reclaims
//     after it, two sweeps in all;
//   - hostlease_allocation_failures_total{reason="exhausted"} and
//     hostlease_pool_free_addresses show it.
func TestScenario6Exhaustion(t *testing.T) {
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.17.0/29", RangeStart: "10.99.17.2", RangeEnd: "10.99.17.4", FailPlugin: true, Marker: true,
		FailStatusOnExhaustion: ptr(true)})
	ctx := context.Background()

	f := facts(env)
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

	// 3. NetworkReady at the very next Status call. On a runtime that runs
	// CNI STATUS inside CRI Status (2.x) it is false, naming the exhausted
	// range set: the latency is that one call. 1.x never calls STATUS, so
	// the node stays Ready whatever the plugin would say.
	callStart := time.Now()
	cond, _, err := env.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd %s: first CRI Status after the pool filled (the call took %v): NetworkReady=%v reason %q message %q",
		env.Version, time.Since(callStart).Round(time.Millisecond), cond.Status, cond.Reason, cond.Message)
	if f.CallsStatus {
		if cond.Status || !strings.Contains(cond.Message, "no free address") {
			t.Errorf("NetworkReady=%v %q; want false naming the exhausted range set (failStatusOnExhaustion true)", cond.Status, cond.Message)
		}
		// 4. With "failStatusOnExhaustion": false the node stays Ready while
		// the pool is still exhausted; then back to true.
		n.Opts.FailStatusOnExhaustion = ptr(false)
		env.WriteConflist(n.File, n.conflist())
		took := waitStatus(t, env, true, "")
		if p := n.pool(t); p.Free != 0 {
			t.Fatalf("pool changed while flipping the config: %+v", p)
		}
		t.Logf("failStatusOnExhaustion=false loaded after %v: NetworkReady=true although the pool has 0 free", took.Round(time.Millisecond))
		n.Opts.FailStatusOnExhaustion = ptr(true)
		env.WriteConflist(n.File, n.conflist())
		took = waitStatus(t, env, false, "")
		t.Logf("failStatusOnExhaustion=true loaded again after %v: NetworkReady=false", took.Round(time.Millisecond))
	} else if !cond.Status {
		t.Errorf("containerd %s does not call CNI STATUS, yet NetworkReady=false %q", env.Version, cond.Message)
	}

	// 5. hostlease-gc with a 1h interval and no view of the pods' netns: its
	// start sweep counts one miss per leak (--misses 2, no grace, no
	// min-age) and reclaims nothing; nothing but a kick can sweep again.
	// The chain is healed, so the only problem left is the pool.
	n.healChain(t)
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
		"--interval", "1h", "--misses", "2", "--grace", "0s", "--min-age", "0s", "--netns-grace", "0s", "--max-reclaim-fraction", "1",
		"--netns-dir", hiddenNetnsDir(t, env)}})
	// StartDaemon returned after the start sweep finished (/readyz).
	sw0 := sweeps(t, d)
	recs := n.records(t)
	for _, r := range recs {
		if r.Obs.Misses != 1 {
			t.Errorf("after the start sweep: record %s has %d misses; want 1", r.IP, r.Obs.Misses)
		}
	}
	if p := n.pool(t); p.Free != 0 || len(recs) != 3 || sw0 != 1 || len(n.reclaims(t)) != 0 {
		t.Fatalf("before the kick: pool %+v, %d records, %v sweeps, %d reclaims; want the start sweep only, nothing reclaimed", p, len(recs), sw0, len(n.reclaims(t)))
	}
	t.Logf("hostlease-gc --interval 1h: the start sweep saw 3 leak candidates (1 miss each) and reclaimed nothing")

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
	evs := n.waitReclaims(t, 3, func() string { return describe(n.records(t)) + "\n" + d.LogTail(10) })
	for _, ev := range evs {
		if ev.Time.Before(kickAt) {
			t.Errorf("reclaim of %s at %v, before the kick at %v", ev.IP, ev.Time, kickAt)
		}
	}
	t.Logf("kick -> last reclaim: %v (measured; the daemon polls the kick file every 1s)", evs[len(evs)-1].Time.Sub(kickAt).Round(time.Millisecond))

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
	var ip string
	waitFor(t, "a kubelet-style retry succeeds", func() (bool, string) {
		sid, err := env.RunPodSandbox(ctx, pod)
		if err != nil {
			time.Sleep(500 * time.Millisecond) // kubelet's backoff between attempts
			pod.Attempt++
			return false, err.Error()
		}
		_, ips, _ := env.PodSandboxStatus(ctx, sid)
		ip = strings.Join(ips, ",")
		return true, ""
	})
	t.Logf("retry (attempt %d) READY with %s, %v after the exhaustion failure", pod.Attempt+1, ip, time.Since(failedAt).Round(time.Millisecond))

	// 9. Metrics of the kick sweep (updated at its end, after the store).
	m := waitMetrics(t, d, "metrics of the kick sweep", func(m harness.MetricSet) bool {
		rec, _ := m.Sum("hostlease_reclaims_total", "network", n.Network)
		sw, _ := m.Sum("hostlease_sweeps_total")
		return rec == 3 && sw == 2
	})
	fails, _ := m.Sum("hostlease_allocation_failures_total", "network", n.Network, "reason", "exhausted")
	free1, _ := m.Sum("hostlease_pool_free_addresses", "network", n.Network)
	last, _ := m.Sum("hostlease_last_exhaustion_timestamp_seconds", "network", n.Network)
	t.Logf("metrics:\n      %s", strings.Join(m.Lines("hostlease_allocation_failures_total", "hostlease_pool_free_addresses",
		"hostlease_last_exhaustion_timestamp_seconds", "hostlease_reclaims_total", "hostlease_sweeps_total"), "\n      "))
	if fails != 1 || free1 != 3 || last < float64(filled.Unix()) {
		t.Errorf("metrics: exhausted failures %v, pool free %v, last exhaustion %v; want 1, 3, a recent time", fails, free1, last)
	}
}

// waitStatus polls CRI Status until NetworkReady is ready and, when contains
// is set, the loaded CNI config contains it (or, for ready == false, until
// the loaded config no longer contains the previous marker). It returns how
// long that took.
func waitStatus(t *testing.T, env *harness.Env, ready bool, contains string) time.Duration {
	t.Helper()
	return waitFor(t, "NetworkReady change", func() (bool, string) {
		cond, info, err := env.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		loaded := contains == "" || strings.Contains(info["cniconfig"], contains)
		return cond.Status == ready && loaded, cond.Message
	})
}
