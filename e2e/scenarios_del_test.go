package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestScenario5DelAfterIncompleteAdd: a DEL for a sandbox whose ADD never
// completed must succeed, so the runtime can release the sandbox name (a DEL
// that keeps failing blocks the pod forever: containerd #10842, multus #1498).
func TestScenario5DelAfterIncompleteAdd(t *testing.T) {
	// The last plugin fails ADD, DEL works: containerd's cleanup DEL reaches
	// hostlease for an allocation that is still pending and releases it.
	t.Run("failed-add", func(t *testing.T) {
		fullSuiteOnly(t)
		env := setupHostlease(t)
		n := newNet(t, env, netOpts{Subnet: "10.99.15.0/24", FailPlugin: true, Marker: true})
		n.touch(t, n.FailAdd, "injected by "+t.Name())
		pod := harness.Pod{Name: "retry-0", Namespace: "scenario5", UID: podUID("retry-0")}
		for i := 1; i <= 3; i++ {
			// The same sandbox name each time: a DEL that failed would leave
			// the name reserved and the next attempt would fail differently.
			n.failPod(t, pod, "failplugin: ADD failing on purpose")
			if recs := n.records(t); len(recs) != 0 {
				t.Fatalf("attempt %d: the cleanup DEL left %s", i, describe(recs))
			}
		}
		released := 0
		for _, ev := range n.audit(t) {
			if ev.Action == "release" && ev.By == "plugin" {
				released++
			}
		}
		calls := n.failCalls(t)
		t.Logf("3 failed attempts with the same sandbox name: failplugin calls %v; hostlease released %d pending allocations on DEL", calls, released)
		if released != 3 || calls["DEL failed"] != 0 {
			t.Errorf("released %d, failplugin %v; want 3 releases and no failed DEL", released, calls)
		}

		n.remove(t, n.FailAdd)
		id, ip := n.runPod(t, pod)
		t.Logf("same sandbox name again with the chain healed: READY with %s (no stuck name)", ip)

		// The runtime may repeat a DEL (or send one for an attachment it
		// never finished): exit 0 every time, and touch nothing else.
		failedID := n.failedAddIDs(t)[0]
		for i := 1; i <= 2; i++ {
			if out, err := n.execPlugin(t, "DEL", failedID, ""); err != nil {
				t.Fatalf("direct DEL #%d of failed sandbox %.12s: %v\n%s", i, failedID, err, out)
			}
		}
		if recs := n.records(t); len(recs) != 1 || recs[0].ContainerID != id {
			t.Fatalf("after the repeated DELs the store holds %s; want only the live pod's record", describe(recs))
		}
		missing := *n
		missing.DataDir = filepath.Join(env.Dir, "no-such-dir")
		if out, err := missing.execPlugin(t, "DEL", failedID, ""); err != nil {
			t.Fatalf("DEL with a missing dataDir: %v\n%s", err, out)
		}
		t.Logf("direct DEL of sandbox %.12s twice, and once with a missing dataDir: all exit 0; the live record is untouched", failedID)
		n.stopRemove(t, id)
	})

	// containerd is killed while the chain's ADD is in flight: the address
	// is reserved (pending) and CRI later lists the sandbox NOTREADY;
	// stop+remove succeed. What they do with the address depends on the
	// version (runtimeFacts.StopTearsDownWithoutResult): with containerd PR
	// #12923 stop runs CNI DEL although the sandbox has no CNI result and
	// hostlease releases the pending record, so there is nothing to reclaim
	// and hostlease-gc must reclaim nothing; without it (2.1.4) stop calls no
	// DEL, the address leaks, and the same pod's next sandbox's ADD releases
	// it (its netns was torn down: pod_sandbox_replaced), so hostlease-gc
	// again has nothing to reclaim. Either way the name is free again and a
	// late DEL for that sandbox succeeds, twice.
	t.Run("containerd-killed-mid-add", func(t *testing.T) {
		env := setupHostlease(t)
		f := facts(env)
		n := newNet(t, env, netOpts{Subnet: "10.99.16.0/24", FailPlugin: true, Marker: true})
		n.touch(t, n.HoldAdd, "held by "+t.Name())
		pod := harness.Pod{Name: "crash-0", Namespace: "scenario5", UID: podUID("crash-0")}
		errc := make(chan error, 1)
		go func() {
			_, err := env.RunPodSandbox(context.Background(), pod)
			errc <- err
		}()
		var leaked *allocator.Record
		waitFor(t, "IPAM reserved an address for the in-flight ADD", func() (bool, string) {
			recs := n.records(t)
			if len(recs) == 1 {
				leaked = recs[0]
			}
			return leaked != nil, describe(recs)
		})
		env.Kill()
		if err := <-errc; err == nil {
			t.Fatal("RunPodSandbox succeeded although containerd was killed during it")
		}
		n.remove(t, n.HoldAdd)
		env.Start()
		env.WaitNetworkReady(n.Network, hangGuard)
		list, err := env.ListPodSandbox(context.Background())
		if err != nil || len(list) != 1 || list[0].Id != leaked.ContainerID {
			t.Fatalf("after the restart CRI lists %v (%v); want the crashed sandbox %.12s", list, err, leaked.ContainerID)
		}
		t.Logf("containerd %s killed mid-ADD: %s held (%s) by sandbox %.12s, which CRI lists %v", env.Version, leaked.IP, leaked.State, leaked.ContainerID, list[0].State)

		delsBefore := n.failCalls(t)["DEL"]
		n.stopRemove(t, leaked.ContainerID)
		dels := n.failCalls(t)["DEL"] - delsBefore
		leaks := 0
		if f.StopTearsDownWithoutResult {
			if recs := n.records(t); len(recs) != 0 || dels < 1 {
				t.Fatalf("containerd %s (PR #12923): after stop+remove (%d CNI DELs) the store holds %s; want the pending record released by DEL", env.Version, dels, describe(recs))
			}
			released := false
			for _, ev := range n.audit(t) {
				released = released || (ev.Action == "release" && ev.By == "plugin" && ev.IP == leaked.IP && ev.ContainerID == leaked.ContainerID)
			}
			if !released {
				t.Errorf("audit log has no plugin release of %s by sandbox %.12s", leaked.IP, leaked.ContainerID)
			}
			t.Logf("stop+remove ran %d CNI DEL: hostlease released the pending %s; nothing leaked", dels, leaked.IP)
		} else {
			if recs := n.records(t); len(recs) != 1 || recs[0].IP != leaked.IP || dels != 0 {
				t.Fatalf("containerd %s (no PR #12923): after stop+remove (%d CNI DELs) the store holds %s; want no DEL and %s leaked", env.Version, dels, describe(recs), leaked.IP)
			}
			leaks = 1
			t.Logf("stop+remove succeeded without a CNI DEL: %s leaked", leaked.IP)
		}

		id, ip := n.runPod(t, pod)
		if ip == leaked.IP.String() {
			t.Fatalf("the new sandbox got the leaked address %s", ip)
		}
		t.Logf("same sandbox name again: READY with %s (no stuck name)", ip)
		if leaks == 1 {
			// The same pod's next sandbox: its ADD found the crashed
			// sandbox's netns torn down (containerd's stop removed it) and
			// released its address before choosing (the plugin's own proof),
			// so nothing is left for the daemon.
			released := false
			for _, ev := range n.audit(t) {
				if allocator.IsPluginRelease(ev) && ev.Reason == allocator.ReasonPodSandboxReplaced &&
					ev.IP == leaked.IP && ev.ContainerID == leaked.ContainerID {
					released = true
				}
			}
			if !released {
				t.Fatalf("the new sandbox's ADD did not release the crash leak %s of sandbox %.12s (audit: no %s); the store holds %s",
					leaked.IP, leaked.ContainerID, allocator.ReasonPodSandboxReplaced, describe(n.records(t)))
			}
			t.Logf("the new sandbox's ADD released the crash leak %s (%s): nothing left to reclaim", leaked.IP, allocator.ReasonPodSandboxReplaced)
		}

		d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
			"--interval", "1s", "--misses", "2", "--grace", "1s", "--min-age", "2s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
		// Nothing is left (no leak, or the plugin released it): after more
		// sweeps than any reclaim needs with these flags (misses 2, grace 1s,
		// min-age 2s), none happened.
		sw0 := sweeps(t, d)
		waitFor(t, "5 more sweeps", func() (bool, string) {
			sw := sweeps(t, d)
			return sw >= sw0+5, fmt.Sprintf("%.0f sweeps", sw)
		})
		if evs := n.reclaims(t); len(evs) != 0 {
			t.Errorf("hostlease-gc reclaimed %+v although nothing leaked", evs)
		}
		t.Logf("hostlease-gc swept 5 more times and reclaimed nothing (nothing leaked)")
		if recs := n.records(t); len(recs) != 1 || recs[0].ContainerID != id {
			t.Fatalf("the store holds %s; want only the new pod's record", describe(recs))
		}

		for i := 1; i <= 2; i++ {
			if out, err := n.execPlugin(t, "DEL", leaked.ContainerID, leaked.Netns); err != nil {
				t.Fatalf("late DEL #%d of the crashed sandbox: %v\n%s", i, err, out)
			}
		}
		if recs := n.records(t); len(recs) != 1 || recs[0].ContainerID != id || recs[0].State != allocator.StateCommitted {
			t.Fatalf("after the late DELs: %s; want only the new pod's committed record", describe(recs))
		}
		t.Logf("late DEL of the crashed sandbox twice: both exit 0, the new pod's record untouched")
		n.stopRemove(t, id)
	})

	// A READY pod whose chain's DEL fails when it is stopped: the sandbox has
	// a CNI result, so every containerd version returns the error from
	// StopPodSandbox (and RemovePodSandbox) and keeps the sandbox listed,
	// NOTREADY, with its address: nothing leaks. hostlease-gc must leave the
	// address alone (verdict stale: the runtime's to release) for as long as
	// the sandbox is listed, and the next stop after the DEL works releases it.
	t.Run("teardown-fails-at-stop", func(t *testing.T) {
		env := setupHostlease(t)
		n := newNet(t, env, netOpts{Subnet: "10.99.20.0/24", FailPlugin: true, Marker: true})
		pod := harness.Pod{Name: "stuck-0", Namespace: "scenario5", UID: podUID("stuck-0")}
		id, ip := n.runPod(t, pod)
		n.touch(t, n.FailDel, "injected by "+t.Name())
		ctx := context.Background()
		stopErr := env.StopPodSandbox(ctx, id)
		removeErr := env.RemovePodSandbox(ctx, id)
		list, err := env.ListPodSandbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("containerd %s, DEL failing: StopPodSandbox -> %v; RemovePodSandbox -> %v; CRI lists %s", env.Version, stopErr, removeErr, describeSandboxes(list))
		if stopErr == nil || removeErr == nil || len(list) != 1 || list[0].Id != id || list[0].State == runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("want stop and remove to fail and the sandbox listed, not READY")
		}
		d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
			"--interval", "1s", "--misses", "1", "--grace", "0s", "--min-age", "0s", "--netns-grace", "0s", "--max-reclaim-fraction", "1"}})
		// More sweeps than a reclaim would need with these flags; the record
		// is judged stale each time and kept.
		sw0 := sweeps(t, d)
		waitFor(t, "3 sweeps judged the record stale", func() (bool, string) {
			recs := n.records(t)
			stale := len(recs) == 1 && recs[0].Obs.Verdict == "stale"
			return stale && sweeps(t, d) >= sw0+3, describe(recs)
		})
		if evs := n.reclaims(t); len(evs) != 0 {
			t.Fatalf("hostlease-gc reclaimed %+v from a sandbox the runtime still lists", evs)
		}
		if r := byIP(n.records(t))[ip]; r == nil || r.ContainerID != id {
			t.Fatalf("the record of %s changed: %s", ip, describe(n.records(t)))
		}
		t.Logf("hostlease-gc kept %s (verdict stale) over %.0f sweeps while the sandbox was listed NOTREADY", ip, sweeps(t, d)-sw0)
		n.remove(t, n.FailDel)
		n.stopRemove(t, id)
		if recs := n.records(t); len(recs) != 0 {
			t.Fatalf("after the stop with a working DEL the store holds %s", describe(recs))
		}
		if evs := n.reclaims(t); len(evs) != 0 {
			t.Errorf("audit log has reclaims %+v; the plugin's DEL released the address", evs)
		}
		t.Logf("DEL works again: stop+remove released %s (plugin release), no reclaim", ip)
	})
}
