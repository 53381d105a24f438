package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// One cluster for the package: the control plane and node take ~15 s warm,
// every scenario cleans up its own objects.
var (
	clusterOnce sync.Once
	clusterVal  *Cluster
	clusterErr  error
	anyFailed   bool
	failedMu    sync.Mutex
	// stopOnce stops the cluster once: after the tests, or on an interrupt
	// (harness.OnInterrupt), whose artefacts are kept.
	stopOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if clusterVal != nil {
		failedMu.Lock()
		failed := anyFailed || code != 0
		failedMu.Unlock()
		stopCluster(clusterVal, failed)
	}
	os.Exit(code)
}

func stopCluster(c *Cluster, keep bool) {
	stopOnce.Do(func() {
		if keep {
			keepArtifacts(c)
		}
		c.Stop()
	})
}

// cluster returns the package's cluster, starting it on first use; it skips
// when not root (the only reason to skip) and fails when it cannot start.
func cluster(t testing.TB) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e/k8s: skipped: needs root (runs etcd, a control plane, containerd and kubelet, creates bridges and a mount namespace)")
	}
	t.Cleanup(func() {
		if t.Failed() {
			failedMu.Lock()
			anyFailed = true
			failedMu.Unlock()
		}
	})
	clusterOnce.Do(func() {
		prefix := "e2e/k8s: "
		if Instance != "" {
			prefix = "e2e/k8s (node " + Instance + "): "
		}
		logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, prefix+f+"\n", a...) }
		clusterVal, clusterErr = Start(logf)
		if c := clusterVal; c != nil {
			harness.OnInterrupt(func() { stopCluster(c, true) })
		}
		if clusterErr == nil {
			clusterErr = setupHostlease(clusterVal)
		}
	})
	if clusterErr != nil {
		t.Fatalf("cluster: %v (logs in %s)", clusterErr, LogDir)
	}
	return clusterVal
}

// keepArtifacts copies the logs and the cluster's state dumps to
// $HOSTLEASE_E2E_ARTIFACTS (default <repo>/bin/e2e-k8s-artifacts/<time>[-<Instance>]).
func keepArtifacts(c *Cluster) {
	base := os.Getenv("HOSTLEASE_E2E_ARTIFACTS")
	if base == "" {
		root, err := harness.RepoRoot()
		if err != nil {
			return
		}
		base = filepath.Join(root, "bin", "e2e-k8s-artifacts")
	}
	dst := filepath.Join(base, time.Now().UTC().Format("20060102T150405Z")+strings.TrimSuffix("-"+Instance, "-"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return
	}
	for name, args := range map[string][]string{
		"pods.txt":      {"get", "pods", "-A", "-o", "wide"},
		"events.txt":    {"get", "events", "-A", "--sort-by=.lastTimestamp"},
		"nodes.yaml":    {"get", "nodes", "-o", "yaml"},
		"daemonset.txt": {"-n", SysNamespace, "describe", "daemonset", DaemonSetName},
		"gc.log":        {"-n", SysNamespace, "logs", "ds/" + DaemonSetName, "--all-containers", "--tail=-1"},
	} {
		out, err := c.Kubectl(args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		_ = os.WriteFile(filepath.Join(dst, name), []byte(out), 0o644)
	}
	_ = exec.Command("cp", "-a", LogDir, filepath.Join(dst, "logs")).Run()
	_ = exec.Command("cp", "-a", CNIConfDir, filepath.Join(dst, "cni-conf")).Run()
	fmt.Fprintf(os.Stderr, "e2e/k8s: a test failed; logs kept in %s\n", dst)
}

// waitUntil polls cond every 500ms until it returns true; the timeout is a
// hang guard, and its message says what was last seen.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if seen != "" {
			last = seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func kubectl(t testing.TB, c *Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func apply(t testing.TB, c *Cluster, manifest string) {
	t.Helper()
	if out, err := c.KubectlIn([]byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// records reads the plugin's stores on the node with the project's CLI.
func records(t testing.TB) []allocator.Record {
	t.Helper()
	out, err := runGC("list", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", CNIDataDir)
	if err != nil {
		t.Fatal(err)
	}
	var rs []allocator.Record
	if err := json.Unmarshal(out, &rs); err != nil {
		t.Fatalf("hostlease-gc list -o json: %v\n%s", err, out)
	}
	return rs
}

// auditLog is every network's audit log on the node (oldest entries pruned
// by the store's bound), as `hostlease-gc audit -o json` shows it.
func auditLog(t testing.TB) []allocator.AuditEvent {
	t.Helper()
	out, err := runGC("audit", "-o", "json", "--limit", "100000", "--lock-timeout", harness.OracleLockWait, "--data-dir", CNIDataDir)
	if err != nil {
		t.Fatal(err)
	}
	var evs []allocator.AuditEvent
	if err := json.Unmarshal(out, &evs); err != nil {
		t.Fatalf("hostlease-gc audit -o json: %v\n%s", err, out)
	}
	return evs
}

// runGC runs the project's hostlease-gc CLI on the node (stdout, stderr
// in the error).
func runGC(args ...string) ([]byte, error) {
	bin, err := harness.ProjectBin("hostlease-gc")
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("hostlease-gc %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// gcPod is the name of the DaemonSet's pod on the node.
func gcPod(t testing.TB, c *Cluster) string {
	t.Helper()
	out := kubectl(t, c, "-n", SysNamespace, "get", "pods", "-l", "app.kubernetes.io/name=hostlease-gc",
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
	f := strings.Fields(out)
	if len(f) != 1 {
		t.Fatalf("want one running hostlease-gc pod, got %q", out)
	}
	return f[0]
}
