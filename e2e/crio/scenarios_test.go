package crio

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
)

// daemonArgs sweep every second and reclaim without proof only after rules a
// test never reaches: whatever the daemon reclaims here, it reclaimed for a
// proof of death.
var daemonArgs = []string{"--interval", "1s", "--misses", "1000", "--grace", "24h", "--min-age", "24h", "--netns-grace", "1s"}

// heldBy returns the addresses held for the pod UID uid.
func heldBy(tn *testNet, t *testing.T, uid string) []string {
	t.Helper()
	var out []string
	for _, r := range tn.records(t) {
		if r.PodUID == uid {
			out = append(out, r.IP.String()+"("+r.ContainerID[:12]+","+string(r.State)+")")
		}
	}
	return out
}

// auditOf returns the audit entries of action whose container is id ("" any).
func auditOf(tn *testNet, t *testing.T, action, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range tn.audit(t) {
		if e["action"] == action && (id == "" || e["containerID"] == id) {
			out = append(out, e)
		}
	}
	return out
}

// The #12130 loop on CRI-O: a plugin after the IPAM fails ADD and then DEL,
// and the pod is retried. Per attempt the test records what CRI-O leaves
// (addresses held for the pod, sandboxes listed, libcni cache files) and
// asserts what hostlease promises: the pod holds at most one address (each
// ADD releases the previous attempt's, whose netns CRI-O removed), the daemon
// against crio.sock reclaims the last one with proof (netns gone), and a pod
// that runs beside it keeps its address throughout.
func TestChainFailureLoop(t *testing.T) {
	n := startNode(t)
	tn := newNet(t, n, netOpts{Subnet: "10.97.1.0/24", FailPlugin: true})
	steadyID, steadyIP := n.mustRun(pod{Name: "steady"})

	tn.breakChain(t)
	const attempts = 4
	loop := pod{Name: "loop", UID: "uid-loop"}
	for i := range attempts {
		loop.Attempt = uint32(i)
		if _, err := n.run(loop); err == nil {
			t.Fatalf("attempt %d: RunPodSandbox succeeded with the chain failing ADD", i+1)
		}
		held := heldBy(tn, t, loop.UID)
		sbs := 0
		for _, sb := range n.sandboxes() {
			if sb.Metadata.Uid == loop.UID {
				sbs++
			}
		}
		caches := len(tn.cacheFiles()) - 1 // the steady pod's own
		t.Logf("FIGURE crio %s #12130 attempt %d: pod holds %d address(es) %v; CRI-O lists %d sandbox(es) of the pod; %d libcni cache file(s) of failed attempts",
			crioVersion, i+1, len(held), held, sbs, caches)
		if len(held) > 1 {
			t.Errorf("attempt %d: the pod holds %d addresses %v, want at most 1 (the previous attempts' netns are gone)", i+1, len(held), held)
		}
		if sbs != 0 {
			t.Errorf("attempt %d: CRI-O lists %d sandboxes of the failed pod", i+1, sbs)
		}
	}
	if len(heldBy(tn, t, loop.UID)) != 1 {
		t.Fatalf("after %d failed attempts the pod holds %v, want its last attempt's address", attempts, heldBy(tn, t, loop.UID))
	}
	if plugin := len(auditOf(tn, t, "release", "")); plugin != attempts-1 {
		t.Errorf("%d releases in the audit log, want %d (one per retry's ADD)", plugin, attempts-1)
	}

	d := n.startDaemon(tn.DataDir, daemonArgs...)
	waitFor(t, "the daemon reclaims the last attempt's address", func() bool { return len(heldBy(tn, t, loop.UID)) == 0 })
	rec := auditOf(tn, t, "reclaim", "")
	if len(rec) != 1 || !strings.HasPrefix(fmt.Sprint(rec[0]["reason"]), "netns_gone") {
		t.Errorf("daemon reclaims %v, want one with reason netns_gone", rec)
	}
	t.Logf("FIGURE crio %s #12130: daemon reclaimed %v %v after it started", crioVersion, rec[0]["ip"],
		harness.EventTime(map[string]any{"time": rec[0]["time"]}).Sub(d.Started()).Round(10*time.Millisecond))
	if got := tn.held(t)[steadyID]; got != steadyIP {
		t.Errorf("the running pod's %s: store holds %q for it", steadyIP, got)
	}
	tn.healChain(t)
	loop.Attempt++
	if _, ip := n.mustRun(loop); ip == "" {
		t.Error("healed chain: the pod got no address")
	}
}

// CRI-O's CNI GC at startup: CRI-O lists the sandboxes it restored in
// cni.dev/valid-attachments, hostlease's GC verb releases every other
// record (a leak CRI-O forgot), and no listed attachment loses its address.
// A sandbox whose ADD was in flight when CRI-O was killed is measured: what
// CRI-O passes for it and what becomes of its address.
func TestStartupGC(t *testing.T) {
	n := startNode(t)
	tn := newNet(t, n, netOpts{Subnet: "10.97.2.0/24", FailPlugin: true})
	keep := map[string]string{}
	for _, name := range []string{"keep-a", "keep-b"} {
		id, ip := n.mustRun(pod{Name: name})
		keep[id] = ip
	}
	// A leak: ADD and DEL fail, CRI-O forgets the sandbox, the store keeps it.
	tn.breakChain(t)
	if _, err := n.run(pod{Name: "leak"}); err == nil {
		t.Fatal("RunPodSandbox succeeded with the chain failing ADD")
	}
	tn.healChain(t)
	leaked := heldBy(tn, t, "uid-leak")
	if len(leaked) != 1 {
		t.Fatalf("the failed pod holds %v, want one leaked address", leaked)
	}

	// CRI-O sent one GC when it first loaded the network (no pods yet).
	before := len(tn.gcCalls(t))
	n.restart()
	waitFor(t, "CRI-O's startup GC released the leak", func() bool { return len(heldBy(tn, t, "uid-leak")) == 0 })
	gcs := tn.gcCalls(t)[before:]
	if len(gcs) != 1 {
		t.Fatalf("CRI-O sent %d GCs at its restart, want 1: %v", len(gcs), gcs)
	}
	t.Logf("FIGURE crio %s startup GC: cni.dev/valid-attachments = %v", crioVersion, gcs[0]["validAttachments"])
	for id := range keep {
		if !strings.Contains(fmt.Sprint(gcs[0]["validAttachments"]), id) {
			t.Errorf("the GC's valid attachments do not name running sandbox %.12s", id)
		}
	}
	if g := auditOf(tn, t, "gc", ""); len(g) != 1 {
		t.Errorf("GC released %d records, want the one leak: %v", len(g), g)
	}
	held := tn.held(t)
	for id, ip := range keep {
		if held[id] != ip {
			t.Errorf("running sandbox %.12s lost %s at CRI-O's GC (store: %q)", id, ip, held[id])
		}
	}

	// CRI-O killed while a sandbox's ADD waits in the chain after the IPAM.
	tn.touch(t, tn.HoldAdd)
	errc := make(chan error, 1)
	go func() { _, err := n.run(pod{Name: "inflight"}); errc <- err }()
	waitFor(t, "the in-flight ADD has its address", func() bool { return len(heldBy(tn, t, "uid-inflight")) == 1 })
	inflight := tn.records(t)
	before = len(tn.gcCalls(t))
	n.stop(true)
	<-errc
	n.start()
	waitFor(t, "CRI-O's startup GC", func() bool { return len(tn.gcCalls(t)) == before+1 })
	t.Logf("FIGURE crio %s startup GC after a kill mid-ADD: cni.dev/valid-attachments = %v", crioVersion, tn.gcCalls(t)[before]["validAttachments"])
	after := heldBy(tn, t, "uid-inflight")
	var inflightID string
	for _, r := range inflight {
		if r.PodUID == "uid-inflight" {
			inflightID = r.ContainerID
		}
	}
	t.Logf("FIGURE crio %s killed mid-ADD: sandbox %.12s listed after restart: %v; its address after the startup GC: %v; audit: %v",
		crioVersion, inflightID, listed(n, inflightID), after, auditFor(tn, t, inflightID))
	tn.remove(t, tn.HoldAdd)
	for id, ip := range keep {
		if tn.held(t)[id] != ip {
			t.Errorf("running sandbox %.12s lost %s across the kill", id, ip)
		}
	}
}

func listed(n *node, id string) bool {
	for _, sb := range n.sandboxes() {
		if sb.Id == id {
			return true
		}
	}
	return false
}

func auditFor(tn *testNet, t *testing.T, id string) []string {
	var out []string
	for _, e := range tn.audit(t) {
		if e["containerID"] == id {
			out = append(out, fmt.Sprintf("%v by %v (%v)", e["action"], e["by"], e["reason"]))
		}
	}
	return out
}

// STATUS at CRI-O's startup with a full pool: with failStatusOnExhaustion
// true CRI-O reports NetworkReady=false (and holds pod creation) until an
// address is free; with the default (false) a full pool never makes the
// node NotReady.
func TestStatusAtStartup(t *testing.T) {
	for _, failOnFull := range []bool{false, true} {
		t.Run(fmt.Sprintf("failStatusOnExhaustion=%v", failOnFull), func(t *testing.T) {
			n := startNode(t)
			o := netOpts{Subnet: "10.97.3.0/24", RangeStart: "10.97.3.10", RangeEnd: "10.97.3.10"}
			if failOnFull {
				o.FailStatusOnExhaustion = &failOnFull
			}
			tn := newNet(t, n, o)
			id, ip := n.mustRun(pod{Name: "full"})
			if ip != "10.97.3.10" {
				t.Fatalf("pod got %q, want the pool's only address", ip)
			}
			n.restart()
			if !failOnFull {
				waitFor(t, "NetworkReady=true with a full pool", func() bool { return n.networkReady().Status })
				t.Logf("FIGURE crio %s STATUS default, full pool at startup: NetworkReady=true", crioVersion)
				return
			}
			var cond string
			waitFor(t, "NetworkReady=false naming the exhausted pool", func() bool {
				c := n.networkReady()
				cond = c.Reason + ": " + c.Message
				return !c.Status && strings.Contains(c.Message, tn.Network)
			})
			t.Logf("FIGURE crio %s STATUS failStatusOnExhaustion=true, full pool at startup: NetworkReady=false %s", crioVersion, cond)
			// An address freed: CRI-O's startup poll (every 0.5 s) sees STATUS pass.
			if err := n.stopPod(id); err != nil {
				t.Fatal(err)
			}
			if err := n.removePod(id); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "NetworkReady=true once an address is free", func() bool { return n.networkReady().Status })
			// After the first success CRI-O 1.36.3 stops calling STATUS
			// (cni_status_grace_period = 0): a pool full again keeps the node Ready.
			n.mustRun(pod{Name: "full-again"})
			time.Sleep(6 * time.Second) // longer than 1.36.0-1.36.2's 5 s poll
			ready := n.networkReady().Status
			t.Logf("FIGURE crio %s STATUS failStatusOnExhaustion=true, pool full again after startup: NetworkReady=%v", crioVersion, ready)
		})
	}
}

// DEL from CRI-O's cache when the pod's netns is gone: stopping the pod
// must succeed and release its address.
func TestDelNetnsGone(t *testing.T) {
	n := startNode(t)
	tn := newNet(t, n, netOpts{Subnet: "10.97.4.0/24"})
	id, ip := n.mustRun(pod{Name: "gone"})
	ns := ""
	for _, r := range tn.records(t) {
		if r.ContainerID == id {
			ns = r.Netns
		}
	}
	if !strings.HasPrefix(ns, n.NetnsDir()+"/") {
		t.Fatalf("the record's netns %q is not under CRI-O's netns dir %s", ns, n.NetnsDir())
	}
	if err := syscall.Unmount(ns, syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ns); err != nil {
		t.Fatal(err)
	}
	if err := n.stopPod(id); err != nil {
		t.Fatalf("StopPodSandbox with the netns gone: %v\n%s", err, n.LogTail(20))
	}
	if got := tn.held(t)[id]; got != "" {
		t.Errorf("%s still held after DEL with the netns gone", ip)
	}
	if err := n.removePod(id); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE crio %s DEL with netns gone: stop ok, %s released by %v", crioVersion, ip, auditFor(tn, t, id))
}

// A reboot with an empty CNI cache (simulated: CRI-O killed, its runroot,
// the netns mounts and libcni's cache of the network gone): what CRI-O calls
// at its next start, and the daemon's proof that the record predates the
// boot (its --proc-dir with a stat file whose btime is after the record).
func TestRebootEmptyCache(t *testing.T) {
	n := startNode(t)
	tn := newNet(t, n, netOpts{Subnet: "10.97.5.0/24", FailPlugin: true})
	id, ip := n.mustRun(pod{Name: "before-boot"})
	n.stop(true)
	for _, dir := range []string{n.RunRoot, n.NsDir} {
		unmountUnder(t, dir)
	}
	if err := os.RemoveAll(n.RunRoot); err != nil {
		t.Fatal(err)
	}
	for _, f := range tn.cacheFiles() {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	boot := time.Now().Truncate(time.Second).Add(time.Second)
	for time.Now().Before(boot.Add(10 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond)
	}
	n.start()
	waitFor(t, "CRI-O ready after the reboot", func() bool { return n.networkReady().Status })
	var verbs []string
	for _, l := range tn.failLog(t) {
		if l["containerID"] == id || l["verb"] == "GC" {
			verbs = append(verbs, fmt.Sprintf("%v(%v)", l["verb"], l["validAttachments"]))
		}
	}
	t.Logf("FIGURE crio %s reboot, empty cache: CRI-O lists %d sandboxes; chain calls for the old sandbox or GC: %v; %s %v",
		crioVersion, len(n.sandboxes()), verbs, ip, auditFor(tn, t, id))
	if tn.held(t)[id] != "" {
		// Not released by CRI-O: the daemon proves it predates the boot.
		proc := t.TempDir()
		stat := fmt.Sprintf("cpu  1 2 3 4 5 6 7 0 0 0\nintr 1\nctxt 2\nbtime %d\nprocesses 3\n", boot.Unix())
		if err := os.WriteFile(filepath.Join(proc, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		n.startDaemon(tn.DataDir, append(daemonArgs, "--proc-dir", proc)...)
		waitFor(t, "the daemon reclaims the record of the previous boot", func() bool { return tn.held(t)[id] == "" })
		t.Logf("FIGURE crio %s reboot: daemon reclaimed %s: %v", crioVersion, ip, auditFor(tn, t, id))
	}
	if len(tn.records(t)) != 0 {
		t.Errorf("records left after the reboot: %v", tn.held(t))
	}
	n.mustRun(pod{Name: "after-boot"})
}

func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mps []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mps = append(mps, f[4])
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mps[i], syscall.MNT_DETACH)
	}
}

// The daemon on CRI-O: --cri-endpoint is crio.sock, --netns-dir CRI-O's
// namespaces_dir/netns. It verifies that dir as the one the plugin saw,
// reclaims a leak whose netns CRI-O removed (proof: netns_gone) and never a
// running pod's address, and exports the same metrics as on containerd.
func TestDaemonOnCrio(t *testing.T) {
	n := startNode(t)
	tn := newNet(t, n, netOpts{Subnet: "10.97.6.0/24", FailPlugin: true})
	runID, runIP := n.mustRun(pod{Name: "running"})
	tn.breakChain(t)
	for _, name := range []string{"leak-1", "leak-2"} {
		if _, err := n.run(pod{Name: name}); err == nil {
			t.Fatal("RunPodSandbox succeeded with the chain failing ADD")
		}
	}
	tn.healChain(t)
	if got := len(tn.records(t)); got != 3 {
		t.Fatalf("%d records, want the running pod's and 2 leaks: %v", got, tn.held(t))
	}
	d := n.startDaemon(tn.DataDir, daemonArgs...)
	waitFor(t, "both leaks reclaimed", func() bool { return len(tn.records(t)) == 1 })
	if tn.held(t)[runID] != runIP {
		t.Errorf("the running pod lost %s", runIP)
	}
	var m harness.MetricSet
	waitFor(t, "metrics show the reclaims", func() bool {
		var err error
		if m, err = d.Metrics(); err != nil {
			return false
		}
		v, _ := m.Sum("hostlease_reclaims_total", "network", tn.Network, "reason", "netns_gone")
		return v == 2
	})
	if v, ok := m.Sum("hostlease_netns_dir_verified"); !ok || v != 1 {
		t.Errorf("hostlease_netns_dir_verified = %v (present %v), want 1: CRI-O's netns dir is the one the plugin saw", v, ok)
	}
	if v, _ := m.Sum("hostlease_reclaim_guard_tripped_total", "network", tn.Network); v != 0 {
		t.Errorf("guard tripped %v times", v)
	}
	t.Logf("FIGURE crio %s daemon: %s", crioVersion, strings.Join(m.Lines("hostlease_reclaims_total", "hostlease_netns_dir_verified", "hostlease_pool_free_addresses"), "; "))
}
