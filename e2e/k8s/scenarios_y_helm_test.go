package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// Runs after the kustomize scenarios (file order) and before the suite's
// audit check: it replaces the kustomize install with the chart and leaves
// neither behind.

const helmRelease = "hostlease"

// helmBin is the real helm, built by hack/helm-setup.sh (cheap when cached).
func helmBin(t testing.TB) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "hack", "helm-setup.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/helm-setup.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1]
}

// runHelm runs helm against the cluster (admin kubeconfig, a private helm
// home) and returns its output.
func runHelm(t testing.TB, c *Cluster, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	home := filepath.Join(Root, "helm-home")
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", c.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// removeKustomizeInstall deletes what `kubectl apply -k e2e/k8s/overlay`
// created except its Namespace, and waits until the daemon's pod is gone
// (foreground: it holds the metrics port on the node).
func removeKustomizeInstall(t testing.TB, c *Cluster) {
	t.Helper()
	kubectl(t, c, "-n", SysNamespace, "delete", "--ignore-not-found", "--cascade=foreground", "--wait",
		"daemonset/"+DaemonSetName, "service/hostlease-gc-metrics", "serviceaccount/hostlease-gc")
	kubectl(t, c, "delete", "--ignore-not-found", "--wait", "clusterrole/hostlease-gc", "clusterrolebinding/hostlease-gc")
}

// kubernetesLeftovers lists the objects of a hostlease install that exist.
func kubernetesLeftovers(t testing.TB, c *Cluster) string {
	t.Helper()
	ns := kubectl(t, c, "-n", SysNamespace, "get", "daemonsets,pods,services,serviceaccounts,configmaps,secrets",
		"-l", "app.kubernetes.io/part-of=hostlease", "-o", "name")
	rel := kubectl(t, c, "-n", SysNamespace, "get", "secrets", "-l", "owner=helm,name="+helmRelease, "-o", "name")
	cl := kubectl(t, c, "get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/part-of=hostlease", "-o", "name")
	return strings.TrimSpace(ns + rel + cl)
}

// Scenario (Helm): the chart deploy/helm/hostlease with e2e/k8s/helm-values.yaml,
// driven by the real helm v3:
//   - helm lint passes; helm install brings the DaemonSet up and installs
//     the plugin;
//   - helm upgrade to a second image and helm rollback while pods churn:
//     the same guarantees as the kubectl rolling update (no failed CNI call,
//     the plugin replaced atomically, no record lost; see rollout);
//   - a containerd #12130 leak is reclaimed with an AddressReclaimed Event
//     on its pod;
//   - helm uninstall removes every Kubernetes object of the release and
//     leaves the plugin binary and its stores on the node (conflists still
//     name the plugin): a pod started afterwards gets a committed address.
func TestHelm(t *testing.T) {
	c := cluster(t)
	requireDefaultNode(t)
	helm := helmBin(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "deploy", "helm", "hostlease")
	values := filepath.Join(root, "e2e", "k8s", "helm-values.yaml")
	checkHelmValues(t, values)

	runHelm(t, c, helm, "lint", chart, "--strict", "-f", values)

	plugin := filepath.Join(CNIBinDir, "hostlease")
	inodeBefore := inode(plugin) // the kustomize install's copy, if any
	removeKustomizeInstall(t, c)
	kubectl(t, c, "apply", "-f", filepath.Join(root, "deploy", "base", "namespace.yaml"))
	installed := false
	t.Cleanup(func() {
		if installed {
			runHelm(t, c, helm, "uninstall", helmRelease, "-n", SysNamespace, "--wait")
		}
	})
	runHelm(t, c, helm, "install", helmRelease, chart, "-n", SysNamespace, "-f", values, "--wait", "--timeout", "3m")
	installed = true
	waitDaemonSetReady(t, c)
	// install-cni of the release put the plugin in place (a new file renamed
	// over the old one: another inode).
	if a, b := mustSHA256(t, plugin), mustSHA256(t, mustProjectBin(t, "hostlease")); a != b {
		t.Fatalf("%s is not bin/hostlease after helm install", plugin)
	}
	if inode(plugin) == inodeBefore {
		t.Errorf("%s is still inode %d: helm install's install-cni did not install it", plugin, inodeBefore)
	}
	waitNodeReady(t, c)

	// helm upgrade to another image and helm rollback while pods churn.
	newPlugin, err := upgradeImage(c)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "e2e-helm-churn"
	apply(t, c, deployment(ns, "churn", 3))
	t.Cleanup(func() { deleteNamespace(t, c, ns) })
	waitPodsRunning(t, c, ns, 3)
	start := time.Now()
	containerdOff, kubeletOff := logSize(filepath.Join(LogDir, "containerd.log")), logSize(filepath.Join(LogDir, "kubelet.log"))
	ch := startChurn(c, ns, "churn", [2]int{6, 2})
	defer ch.Stop()
	r := watchRollout(t, c, ns, newPlugin, start, containerdOff, kubeletOff)
	defer r.w.Stop()
	r.swap(t, "new", UpgradeVersion, func() {
		runHelm(t, c, helm, "upgrade", helmRelease, chart, "-n", SysNamespace, "-f", values,
			"--set", "image.tag="+UpgradeVersion, "--wait", "--timeout", "3m")
	})
	r.swap(t, "old", r.oldVersion, func() {
		runHelm(t, c, helm, "rollback", helmRelease, "1", "-n", SysNamespace, "--wait", "--timeout", "3m")
	})
	r.check(t, ch)
	hist := runHelm(t, c, helm, "history", helmRelease, "-n", SysNamespace)
	t.Logf("helm history:\n%s", hist)
	if !strings.Contains(hist, "Rollback to 1") {
		t.Errorf("helm history does not show the rollback:\n%s", hist)
	}

	// A leak (#12130 chain) reclaimed by the rolled-back release, with an
	// Event on its pod. (After the rollout: the failing chain's teardowns
	// stay out of the logs the rollout is judged by.)
	const leakNS = "e2e-helm-leak"
	startCrashLoop(t, c, leakNS, "crashloop", 1, nil)
	waitUntil(t, 3*time.Minute, "an AddressReclaimed Event on the crash-looping pod", func() (bool, string) {
		for _, e := range reclaimEvents(t, c) {
			if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Namespace == leakNS && strings.HasPrefix(e.InvolvedObject.Name, "crashloop-") {
				t.Logf("AddressReclaimed on pod %s: %s", e.InvolvedObject.Name, e.Message)
				return true, ""
			}
		}
		return false, "none yet"
	})
	healChain()
	waitPodsRunning(t, c, leakNS, 2) // the bystander and the healed pod: no sandbox left to retry
	waitUntil(t, 2*time.Minute, "every leak of "+leakNS+" reclaimed", func() (bool, string) {
		for _, rec := range records(t) {
			if rec.PodNamespace == leakNS && rec.State == allocator.StatePending && !sandboxListed(c, rec.ContainerID) {
				return false, "still held: " + rec.IP.String() + " of " + rec.PodName
			}
		}
		return true, ""
	})

	// helm uninstall: every Kubernetes object of the release goes; the
	// plugin and its stores stay.
	recsBefore := records(t)
	runHelm(t, c, helm, "uninstall", helmRelease, "-n", SysNamespace, "--wait", "--timeout", "3m")
	installed = false
	waitUntil(t, 2*time.Minute, "every object of the release gone", func() (bool, string) {
		left := kubernetesLeftovers(t, c)
		return left == "", left
	})
	if a, b := mustSHA256(t, plugin), mustSHA256(t, mustProjectBin(t, "hostlease")); a != b {
		t.Errorf("helm uninstall changed %s", plugin)
	}
	if recs := records(t); len(recs) != len(recsBefore) {
		t.Errorf("the stores held %d records before helm uninstall, %d after", len(recsBefore), len(recs))
	}
	// The node keeps starting pods: the conflist names the plugin, which
	// outlived the DaemonSet.
	since := time.Now()
	kubectl(t, c, "-n", ns, "scale", "deployment", "churn", "--replicas=4")
	pods := waitPodsRunning(t, c, ns, 4)
	waitUntil(t, time.Minute, "a committed record for a pod started after helm uninstall", func() (bool, string) {
		for _, rec := range records(t) {
			for _, p := range pods {
				if rec.PodUID == p.UID && rec.Created.After(since) && rec.State == allocator.StateCommitted {
					return true, ""
				}
			}
		}
		return false, "none"
	})
}

// The chart's values for this node name the harness's image, paths and
// ports (as TestOverlayChangesOnlyEnvironment checks the overlay's).
func TestHelmValuesMatchHarness(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	checkHelmValues(t, filepath.Join(root, "e2e", "k8s", "helm-values.yaml"))
}

// checkHelmValues fails when the e2e values name other paths or ports than
// the harness's.
func checkHelmValues(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image       struct{ Repository, Tag string }
		CNIBinDir   string `json:"cniBinDir"`
		DataDir     string `json:"dataDir"`
		NetnsDir    string `json:"netnsDir"`
		CRIEndpoint string `json:"criEndpoint"`
		Metrics     struct {
			Host string
			Port int
		}
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s:%s %s %s %s %s %s:%d", v.Image.Repository, v.Image.Tag, v.CNIBinDir, v.DataDir, v.NetnsDir,
		v.CRIEndpoint, v.Metrics.Host, v.Metrics.Port)
	want := fmt.Sprintf("%s %s %s %s unix://%s %s:%d", Image, CNIBinDir, CNIDataDir, NetnsDir, Socket, NodeIP, MetricsPort)
	if got != want {
		t.Fatalf("%s: %s\nthe harness has %s", path, got, want)
	}
}

// inode is path's inode number, 0 if it does not exist.
func inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func mustSHA256(t testing.TB, path string) string {
	t.Helper()
	sum, err := fileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}
