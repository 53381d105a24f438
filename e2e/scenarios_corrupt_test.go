package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// TestScenario8TruncatedStore: the store file is cut to half its size (a
// broken disk, a partial restore). DEL still succeeds, so stop+remove of a
// running pod works; ADD refuses to serve from the damaged store and STATUS
// reports it; hostlease-gc sets the file aside as <net>.db.corrupt-<unix>
// and rebuilds the store from CRI's READY sandboxes; new pods then get
// addresses that do not collide with the pod still running.
func TestScenario8TruncatedStore(t *testing.T) {
	fullSuiteOnly(t)
	env := setupHostlease(t)
	n := newNet(t, env, netOpts{Subnet: "10.99.19.0/24", Marker: true})
	ctx := context.Background()

	podA := harness.Pod{Name: "a-0", Namespace: "scenario8", UID: podUID("a-0")}
	podB := harness.Pod{Name: "b-0", Namespace: "scenario8", UID: podUID("b-0")}
	idA, ipA := n.runPod(t, podA)
	idB, ipB := n.runPod(t, podB)

	// bbolt preallocates its file: the pages in use end at the meta page's
	// high-water mark, usually well before the end of the file.
	fi, err := os.Stat(n.StorePath())
	if err != nil {
		t.Fatal(err)
	}
	used := storeUsedBytes(t, n.StorePath())
	t.Logf("store %s: %d bytes, pages in use end at %d", filepath.Base(n.StorePath()), fi.Size(), used)

	// Cutting only the preallocated tail loses nothing: no false alarm.
	if half := fi.Size() / 2; half >= used {
		if err := os.Truncate(n.StorePath(), half); err != nil {
			t.Fatal(err)
		}
		if recs := n.records(t); len(recs) != 2 || byIP(recs)[ipA] == nil || byIP(recs)[ipB] == nil {
			t.Fatalf("after cutting the unused half (%d -> %d bytes) the store shows %s; want both pods", fi.Size(), half, describe(recs))
		}
		t.Logf("truncated to half (%d bytes): only preallocated space was cut; both records intact, store still served", half)
	}

	// Cutting into the pages in use is damage.
	cut := used / 2
	if err := os.Truncate(n.StorePath(), cut); err != nil {
		t.Fatal(err)
	}
	t.Logf("truncated to %d bytes, half of the pages in use", cut)
	if _, err := env.GC("list", "--data-dir", n.DataDir); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("hostlease-gc list on the truncated store: %v; want an error saying it is truncated", err)
	}

	// DEL succeeds: the pod can be stopped and removed.
	n.stopRemove(t, idA)
	t.Logf("stop+remove of pod a-0 (%s) succeeded on the truncated store", ipA)

	// ADD refuses (CNI error 11, try again later) and STATUS reports it.
	n.failPod(t, harness.Pod{Name: "c-0", Namespace: "scenario8", UID: podUID("c-0")}, "rebuild")
	cond, _, err := env.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("while the store is unreadable: RunPodSandbox fails (try again later); NetworkReady=%v %q", cond.Status, cond.Message)
	if cond.Status || !strings.Contains(cond.Message, "rebuild") {
		t.Errorf("NetworkReady=%v %q; want false, waiting for the rebuild", cond.Status, cond.Message)
	}
	if _, err := os.Stat(n.StorePath()); err != nil {
		t.Fatalf("the damaged store must stay in place as evidence until the daemon sets it aside: %v", err)
	}

	// hostlease-gc's next sweep sets it aside and rebuilds it from CRI.
	d := env.StartDaemon(harness.DaemonOptions{DataDir: n.DataDir, Args: []string{
		"--interval", "1s", "--misses", "2", "--grace", "1s", "--min-age", "2s", "--netns-grace", "1s", "--max-reclaim-fraction", "1"}})
	// Wait for the end state asserted below: the file set aside and a new
	// store whose audit log records the rebuild (written with its records).
	var aside []string
	waitFor(t, "store set aside and rebuilt", func() (bool, string) {
		aside, _ = filepath.Glob(n.StorePath() + ".corrupt-*")
		if len(aside) != 1 {
			return false, d.LogTail(5)
		}
		evs, err := n.readAudit()
		if err != nil {
			return false, "set aside, no readable new store yet: " + err.Error()
		}
		for _, ev := range evs {
			if ev.Action == "rebuild" {
				return true, ""
			}
		}
		return false, "new store without a rebuild event yet"
	})
	if afi, err := os.Stat(aside[0]); err != nil || afi.Size() != cut {
		t.Errorf("set-aside file %s: %v; want the truncated file (%d bytes) kept", aside[0], err, cut)
	}
	recs := n.records(t)
	t.Logf("set aside as %s; rebuilt store: %s", filepath.Base(aside[0]), describe(recs))
	if len(recs) != 1 || recs[0].IP.String() != ipB || recs[0].ContainerID != idB || recs[0].State != allocator.StateCommitted ||
		recs[0].Source != "rebuild" || recs[0].PodName != podB.Name || recs[0].PodNamespace != podB.Namespace || recs[0].PodUID != podB.UID {
		t.Fatalf("rebuilt store %s; want exactly pod b-0's %s, committed, source rebuild, with its pod metadata", describe(recs), ipB)
	}
	rebuilt := false
	for _, ev := range n.audit(t) {
		rebuilt = rebuilt || ev.Action == "rebuild"
	}
	if !rebuilt {
		t.Errorf("the rebuilt store's audit log has no rebuild event")
	}
	waitMetrics(t, d, "hostlease_stores_rebuilt_total 1", func(m harness.MetricSet) bool {
		r, _ := m.Sum("hostlease_stores_rebuilt_total", "network", n.Network)
		return r == 1
	})
	if cond, _, err := env.Status(ctx); err != nil || !cond.Status {
		t.Errorf("after the rebuild NetworkReady=%v %q (%v); want true", cond.GetStatus(), cond.GetMessage(), err)
	}

	// New pods: no collision with b-0, which is still running.
	seen := map[string]string{ipB: "b-0"}
	for _, name := range []string{"c-0", "d-0"} {
		_, ip := n.runPod(t, harness.Pod{Name: name, Namespace: "scenario8", UID: podUID(name)})
		if other, dup := seen[ip]; dup {
			t.Errorf("pod %s got %s, already used by %s", name, ip, other)
		}
		seen[ip] = name
	}
	t.Logf("after the rebuild: addresses %v", seen)
	st, ips, err := env.PodSandboxStatus(ctx, idB)
	if err != nil || st.State.String() != "SANDBOX_READY" || len(ips) != 1 || ips[0] != ipB {
		t.Errorf("pod b-0: %v %v %v; want READY with %s", st.GetState(), ips, err, ipB)
	}
	// The rebuilt record (written without an ifname) is released by b-0's DEL.
	n.stopRemove(t, idB)
	if r := byIP(n.records(t))[ipB]; r != nil {
		t.Errorf("after stop+remove of b-0 its rebuilt record %s is still held: %s", ipB, describe([]*allocator.Record{r}))
	} else {
		t.Logf("stop+remove of b-0 released its rebuilt record %s", ipB)
	}
}

// storeUsedBytes is the size of the pages a bbolt file's meta page accounts
// for (its high-water mark), read with a short read-only open.
func storeUsedBytes(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	if err := db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return size
}
