package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestScenario5DelAfterIncompleteAdd: a DEL for a sandbox whose ADD never
// completed must succeed, so the runtime can release the sandbox name (a DEL
// that keeps failing blocks the pod forever: containerd #10842, multus #1498).
func TestScenario5DelAfterIncompleteAdd(t *testing.T) {
	// The last plugin fails ADD, DEL works: containerd's cleanup DEL reaches
	// hostlease for an allocation that is still pending and releases it.
	t.Run("failed-add", func(t *testing.T) {
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
	// is reserved (pending), CRI later lists the sandbox NOTREADY, and
	// stop+remove succeed without any CNI DEL (containerd 2.1.4 tears the
	// network down only when it has a CNI result): the address leaks.
	// The name is free again, hostlease-gc reclaims the leak, and a late DEL
	// for that sandbox still succeeds, twice.
	t.Run("containerd-killed-mid-add", func(t *testing.T) {
		env := setupHostlease(t)
		n := newNet(t, env, netOpts{Subnet: "10.99.16.0/24", FailPlugin: true, Marker: true})
		n.touch(t, n.DelayAdd, "3s")
		pod := harness.Pod{Name: "crash-0", Namespace: "scenario5", UID: podUID("crash-0")}
		errc := make(chan error, 1)
		go func() {
			_, err := env.RunPodSandbox(context.Background(), pod)
			errc <- err
		}()
		var leaked *allocator.Record
		waitFor(t, 20*time.Second, "IPAM reserved an address for the in-flight ADD", func() (bool, string) {
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
		n.remove(t, n.DelayAdd)
		env.Start()
		env.WaitNetworkReady(n.Network, 30*time.Second)
		list, err := env.ListPodSandbox(context.Background())
		if err != nil || len(list) != 1 || list[0].Id != leaked.ContainerID {
			t.Fatalf("after the restart CRI lists %v (%v); want the crashed sandbox %.12s", list, err, leaked.ContainerID)
		}
		t.Logf("containerd killed mid-ADD: %s held (%s) by sandbox %.12s, which CRI lists %v", leaked.IP, leaked.State, leaked.ContainerID, list[0].State)

		n.stopRemove(t, leaked.ContainerID)
		if recs := n.records(t); len(recs) != 1 || recs[0].IP != leaked.IP {
			t.Fatalf("after stop+remove the store holds %s; containerd 2.1.4 was seen to skip DEL here", describe(recs))
		}
		t.Logf("stop+remove succeeded without a CNI DEL (failplugin calls %v): %s leaked", n.failCalls(t), leaked.IP)

		id, ip := n.runPod(t, pod)
		if ip == leaked.IP.String() {
			t.Fatalf("the new sandbox got the leaked address %s", ip)
		}
		t.Logf("same sandbox name again: READY with %s (no stuck name)", ip)

		d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
			"--interval", "1s", "--misses", "2", "--grace", "1s", "--min-age", "2s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
		evs := n.waitReclaims(t, 1, 2*time.Minute, func() string { return describe(n.records(t)) + "\n" + d.LogTail(10) })
		if evs[0].IP != leaked.IP || evs[0].ContainerID != leaked.ContainerID {
			t.Errorf("audit: reclaimed %s of sandbox %.12s; want exactly the crash leak %s", evs[0].IP, evs[0].ContainerID, leaked.IP)
		}
		if recs := n.records(t); len(recs) != 1 || recs[0].ContainerID != id {
			t.Fatalf("after the reclaim the store holds %s; want only the new pod's record", describe(recs))
		}
		t.Logf("hostlease-gc reclaimed %s (%s) %v after it started; the new pod's record stays",
			leaked.IP, auditReason(evs[0]), evs[0].Time.Sub(d.Started()).Round(time.Millisecond))

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
}
