package gcintegration

import (
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/gcproc"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	gcdaemon "github.com/hostlease/hostlease/pkg/daemon"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// These tests use the node's real netns directory: the plugin is given real
// network namespaces (`ip netns add`, deleted at cleanup) and the daemon runs
// in its own mount namespace (unshare -m, private propagation: nothing it
// mounts reaches the host), where a test may mount an empty tmpfs over its
// --netns-dir, as a hostPath typo with DirectoryOrCreate or a wrong mount
// would give it.

// runtimeNetnsDir is where `ip netns` (and containerd, CRI-O) keep named
// network namespaces.
const runtimeNetnsDir = "/var/run/netns"

// needRealNetns skips unless the test can make network and mount namespaces.
func needRealNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network and mount namespaces")
	}
	for _, tool := range []string{"ip", "unshare", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// realNode is a node whose runtime keeps its netns in runtimeNetnsDir; the
// sandbox IDs carry the test's PID so that tests running at once, here or in
// another package, never share a netns name.
func realNode(t *testing.T) *node {
	n := newNode(t, 8)
	n.netnsDir = runtimeNetnsDir
	return n
}

func (n *node) sandboxID(name string) string {
	h := fnv.New32a()
	h.Write([]byte(n.t.Name()))
	return fmt.Sprintf("hl-%d-%x-%s", os.Getpid(), h.Sum32(), name)
}

// realNetns creates the sandbox's network namespace at n.netns(id), as the
// runtime does before ADD, and deletes it when the test ends.
func (n *node) realNetns(id string) {
	n.t.Helper()
	name := filepath.Base(n.netns(id))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		n.t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	n.t.Cleanup(func() { n.tearDownNetns(id) })
}

// tearDownNetns deletes the sandbox's network namespace, as the runtime does
// when it removes the sandbox.
func (n *node) tearDownNetns(id string) {
	name := filepath.Base(n.netns(id))
	if _, err := os.Lstat(n.netns(id)); err != nil {
		return
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		n.t.Errorf("ip netns del %s: %v: %s", name, err, out)
	}
}

// addReal runs the plugin's ADD for a sandbox with a real netns.
func (n *node) addReal(id string) {
	n.t.Helper()
	n.realNetns(id)
	if o := n.plugin("ADD", id, n.conf); !o.OK() {
		n.t.Fatalf("ADD %s: %s", id, o)
	}
}

// inMountNS makes cmd run in a new private mount namespace; with emptyDir,
// an empty tmpfs is mounted over runtimeNetnsDir there first.
func inMountNS(emptyDir bool) func(*exec.Cmd) {
	script := `exec "$@"`
	if emptyDir {
		script = `mount -t tmpfs hostlease-empty "$0" && exec "$@"`
	}
	return func(cmd *exec.Cmd) {
		cmd.Args = append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-ec", script, runtimeNetnsDir, cmd.Path}, cmd.Args[1:]...)
		cmd.Path, _ = exec.LookPath("unshare")
	}
}

// startDaemonIn is startDaemon in a new mount namespace (inMountNS).
func (n *node) startDaemonIn(emptyDir bool, extra ...string) *daemon {
	t := n.t
	t.Helper()
	p, err := gcproc.Start(gcBin(), append(n.baseFlags(), extra...), inMountNS(emptyDir))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{Daemon: p, t: t, logs: daemonLog{p}}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("hostlease-gc log:\n%s", strings.Join(d.Lines(), "\n"))
		}
	})
	return d
}

// putBeforeBoot writes a record dated before the node's boot (btime of the
// real /proc/stat) into the store with the store API: a real reboot cannot
// be made here, so the records a previous boot left are made by hand,
// exactly as its plugin would have written them.
func (n *node) putBeforeBoot(id string, netns string, boot time.Time) {
	n.t.Helper()
	st, err := store.Open(n.storePath(), store.OpenOptions{LockTimeout: lockTimeout})
	if err != nil {
		n.t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(func(tx *store.Tx) error {
		sets, err := tx.RangeSets()
		if err != nil {
			return err
		}
		_, cerr := allocator.Allocate(tx, allocator.AllocateRequest{Network: network, RangeSets: sets, Now: boot.Add(-time.Hour),
			Owner: allocator.Owner{ContainerID: id, IfName: "eth0", Netns: netns, PodNamespace: "default", PodName: "pod-" + id}})
		if cerr != nil {
			return cerr
		}
		return nil
	}); err != nil {
		n.t.Fatal(err)
	}
}

// An empty tmpfs over the daemon's --netns-dir (a wrong mount) hides every
// netns: it must prove nothing. An ADD in flight (its netns exists in the
// runtime's directory, CRI does not list its sandbox yet, it is younger than
// --min-age) is kept, sweep after sweep; the daemon says once that the proof
// is unavailable (log, hostlease_netns_dir_verified 0, `leaks`); and the
// records of a previous boot are still reclaimed at once (predates_boot).
// A daemon that read the empty directory as proof reclaims the in-flight ADD
// at the first sweep as netns_gone.
func TestEmptyNetnsDirProvesNothing(t *testing.T) {
	needRealNetns(t)
	t.Parallel()
	n := realNode(t)
	inflight := n.sandboxID("inflight")
	n.addReal(inflight)
	boot, err := gcdaemon.ProcBootClock{Dir: "/proc"}.BootTime()
	if err != nil {
		t.Fatal(err)
	}
	n.putBeforeBoot(n.sandboxID("before-boot-1"), n.netns(n.sandboxID("before-boot-1")), boot)
	n.putBeforeBoot(n.sandboxID("before-boot-2"), "", boot)

	d := n.startDaemonIn(true, noProofRules...)
	eventually(t, "three sweeps", func() (bool, string) {
		v := d.scrape().sweeps()
		return v >= 3, fmt.Sprintf("sweeps %v", v)
	})
	m := d.scrape()
	if v := reclaimsOf(m, "netns_gone"); v != 0 {
		t.Errorf("reclaims{netns_gone} %v behind an empty --netns-dir", v)
	}
	if v := reclaimsOf(m, "predates_boot"); v != 2 {
		t.Errorf("reclaims{predates_boot} %v, want the 2 records of the previous boot", v)
	}
	recs := n.records()
	if _, ok := recs[inflight]; !ok || len(recs) != 1 {
		t.Fatalf("records %v, want only the in-flight ADD's", recs)
	}
	if v := m.value(t, "hostlease_netns_dir_verified", nil); v != 0 {
		t.Errorf("hostlease_netns_dir_verified %v behind an empty tmpfs, want 0", v)
	}
	if v := m.value(t, "hostlease_netns_unverified_records", netLabel); v != 1 {
		t.Errorf("hostlease_netns_unverified_records %v, want 1 (the in-flight ADD)", v)
	}
	warned := d.logs.entries("netns proof unavailable: --netns-dir is not verified as the runtime's; absent sandboxes wait for the rules without proof (--misses, --grace, --min-age, API veto, guard)")
	if len(warned) != 1 || warned[0]["state"] != reclaim.NetnsProofOtherDir {
		t.Errorf("log: %d netns proof warnings over 3+ sweeps (%v), want one, state %s", len(warned), warned, reclaim.NetnsProofOtherDir)
	}

	// `leaks` in the same view says why the netns proves nothing.
	rows, stderr := n.leaksIn(true, noProofRules...)
	found := false
	for _, r := range rows {
		if r.Sandbox != inflight {
			continue
		}
		found = true
		if r.Verdict != "keep" || !strings.Contains(r.Detail, "netns proof unavailable") || !strings.Contains(r.Detail, "a wrong mount") {
			t.Errorf("leaks row for the in-flight ADD: %+v; want keep, saying the netns proof is unavailable", r)
		}
	}
	if !found {
		t.Errorf("leaks --all has no row for %s: %+v", inflight, rows)
	}
	if !strings.Contains(stderr, "netns proof unavailable") {
		t.Errorf("leaks stderr %q does not say the netns proof is unavailable", stderr)
	}
}

// The control: the same daemon in its own mount namespace, with the
// runtime's directory as --netns-dir, reclaims a sandbox whose netns the
// runtime deleted at once as netns_gone, keeps the one whose netns exists,
// and says the proof is on.
func TestRuntimesNetnsDirProvesDeath(t *testing.T) {
	needRealNetns(t)
	t.Parallel()
	n := realNode(t)
	gone, inflight := n.sandboxID("torn-down"), n.sandboxID("inflight")
	n.addReal(gone)
	n.addReal(inflight)

	d := n.startDaemonIn(false, append([]string{"--interval", "1h"}, noProofRules...)...)
	eventually(t, "the start-up sweep", func() (bool, string) {
		v := d.scrape().sweeps()
		return v >= 1, fmt.Sprintf("sweeps %v", v)
	})
	if v := d.scrape().value(t, "hostlease_netns_dir_verified", nil); v != 1 {
		t.Fatalf("hostlease_netns_dir_verified %v with the runtime's directory, want 1", v)
	}
	n.tearDownNetns(gone)
	eventually(t, "the torn-down sandbox reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "netns_gone")
		return v == 1, fmt.Sprintf("reclaims{netns_gone} %v", v)
	})
	recs := n.records()
	if _, ok := recs[gone]; ok {
		t.Error("the torn-down sandbox's record is still there")
	}
	if _, ok := recs[inflight]; !ok {
		t.Error("the in-flight ADD (netns present) was reclaimed")
	}
	if on := d.logs.entries("netns proof on: a sandbox absent from CRI whose netns is gone from --netns-dir is reclaimed at once"); len(on) != 1 {
		t.Errorf("log: %d 'netns proof on' lines, want 1", len(on))
	}
}

// leaksIn runs `hostlease-gc leaks --all -o json` in a new mount namespace
// (inMountNS) and returns its rows and stderr.
func (n *node) leaksIn(emptyDir bool, policy ...string) ([]gcdaemon.LeakRow, string) {
	n.t.Helper()
	args := append([]string{"leaks", "--all", "--cri-endpoint", n.cri.Endpoint(), "--data-dir", n.dataDir, "--netns-dir", runtimeNetnsDir, "--no-api", "-o", "json"}, policy...)
	cmd := exec.Command(gcBin(), args...)
	inMountNS(emptyDir)(cmd)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		n.t.Fatalf("hostlease-gc leaks: %v: %s", err, stderr.String())
	}
	rows, err := gcdaemon.DecodeRows[gcdaemon.LeakRow]([]byte(stdout.String()))
	if err != nil {
		n.t.Fatalf("hostlease-gc leaks -o json: %v\n%s", err, stdout.String())
	}
	return rows, stderr.String()
}
