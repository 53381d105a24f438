package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestScenario6Exhaustion: a 3-address pool filled by #12130 leaks of three
// pods (one failed attempt each: no pod retries, so the plugin's per-pod
// release does not apply).
//   - containerd 2.x runs CNI STATUS only inside the CRI Status call (no
//     polling of its own; kubelet calls Status every 5s), so NetworkReady
//     follows the pool at the very next Status call: false while exhausted
//     with failStatusOnExhaustion true, true with it false; 1.x never calls
//     STATUS and stays Ready;
//   - hostlease-gc runs with --interval 1h and without a view of the pods'
//     netns (no proof of teardown), so after its start sweep the leaks wait
//     for a second sweep (--misses 2);
//   - the next pod's RunPodSandbox finds the pool full, and the plugin first
//     frees every leak whose netns containerd tore down (its own proof,
//     audit netns_gone_at_exhaustion), then succeeds: no exhaustion error, no
//     kick, no daemon needed (the kick path is test/gcintegration's);
//   - NetworkReady is true again at the next Status call.
func TestScenario6Exhaustion(t *testing.T) {
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.17.0/29", RangeStart: "10.99.17.2", RangeEnd: "10.99.17.4", FailPlugin: true, Marker: true,
		FailStatusOnExhaustion: ptr(true)})
	ctx := context.Background()

	f := facts(env)
	// 2. Fill the pool with leaks.
	n.breakChain(t)
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("full-%d", i)
		n.failPod(t, harness.Pod{Name: name, Namespace: "scenario6", UID: podUID(name)}, "failplugin: ADD failing on purpose")
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

	// 6. The next pod's ADD frees the dead leaks itself and succeeds.
	pod := harness.Pod{Name: "next-0", Namespace: "scenario6", UID: podUID("next-0")}
	sid, err := env.RunPodSandbox(ctx, pod)
	if err != nil {
		t.Fatalf("RunPodSandbox on a pool full of dead leaks: %v", err)
	}
	_, ips, _ := env.PodSandboxStatus(ctx, sid)
	released := 0
	for _, ev := range n.audit(t) {
		if allocator.IsPluginRelease(ev) && ev.Reason == allocator.ReasonNetnsGoneAtExhaustion {
			released++
		}
	}
	if released != 3 {
		t.Errorf("%d releases %s in the audit log; want the 3 leaks", released, allocator.ReasonNetnsGoneAtExhaustion)
	}
	if _, err := os.Stat(filepath.Join(n.DataDir, ".kick")); !os.IsNotExist(err) {
		t.Errorf("the kick file exists (%v): the ADD reported an exhaustion", err)
	}
	if p := n.pool(t); p.Free != 2 || p.Exhaustions != 0 {
		t.Errorf("after the ADD: %+v; want 2 free, no exhaustion recorded", p)
	}
	t.Logf("pod %s READY with %v: the plugin released the 3 dead leaks (%s) before choosing; %v after the pool filled",
		pod.Name, ips, allocator.ReasonNetnsGoneAtExhaustion, time.Since(filled).Round(time.Millisecond))

	// 7. NetworkReady follows at the next Status call.
	callStart = time.Now()
	cond, _, err = env.Status(ctx)
	if err != nil || !cond.Status {
		t.Errorf("after the release: NetworkReady=%v %q (%v); want true", cond.GetStatus(), cond.GetMessage(), err)
	} else {
		t.Logf("first CRI Status after the release (the call took %v): NetworkReady=true", time.Since(callStart).Round(time.Millisecond))
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
