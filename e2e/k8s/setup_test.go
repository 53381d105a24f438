package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/e2e/harness"
)

// The node's pod network: [bridge(ipam hostlease), (failplugin), hostlease
// commit marker]. Distinct from e2e/'s 10.99.x and bridge names.
const (
	PodNetwork = "hlk8s"
	PodBridge  = "hlk8s-br0"
	PodSubnet  = "10.251.0.0/24"
)

// FailAddFile / FailDelFile make the failplugin in the chain fail while they
// exist (see e2e/failplugin).
var (
	FailAddFile = filepath.Join(Root, "trigger-fail-add")
	FailDelFile = filepath.Join(Root, "trigger-fail-del")
)

// podConflist is the node's conflist; withFail puts the failplugin between
// the bridge and the marker (the containerd #12130 chain).
func podConflist(subnet string, withFail bool, ipamExtra map[string]any) []byte {
	var fail map[string]any
	if withFail {
		fail = map[string]any{}
	}
	return chainConflist(subnet, fail, ipamExtra)
}

// chainConflist is [bridge(ipam hostlease), failplugin, marker]; fail is
// the failplugin's configuration beyond its trigger files (nil: no
// failplugin).
func chainConflist(subnet string, fail, ipamExtra map[string]any) []byte {
	ipam := map[string]any{"type": "hostlease", "ranges": [][]map[string]string{{{"subnet": subnet}}}, "dataDir": CNIDataDir}
	for k, v := range ipamExtra {
		ipam[k] = v
	}
	plugins := []map[string]any{{"type": "bridge", "bridge": PodBridge, "isGateway": true, "ipam": ipam}}
	if fail != nil {
		fp := map[string]any{"type": "failplugin", "failAddFile": FailAddFile, "failDelFile": FailDelFile}
		for k, v := range fail {
			fp[k] = v
		}
		plugins = append(plugins, fp)
	}
	plugins = append(plugins, map[string]any{"type": "hostlease", "dataDir": CNIDataDir})
	b, _ := json.MarshalIndent(map[string]any{"cniVersion": "1.1.0", "name": PodNetwork, "plugins": plugins}, "", "  ")
	return b
}

// breakChain makes the failplugin in the chain fail ADD and DEL until
// healChain (or the end of the test).
func breakChain(t testing.TB) {
	t.Helper()
	for _, f := range []string{FailAddFile, FailDelFile} {
		if err := os.WriteFile(f, []byte("e2e: chain broken on purpose\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(healChain)
}

// healChain lets the failplugin's ADD and DEL succeed again.
func healChain() {
	os.Remove(FailAddFile)
	os.Remove(FailDelFile)
}

// startCrashLoop sets up containerd #12130 in ns, undone at the end of the
// test: a bystander pod runs (its netns keeps the runtime's netns dir in
// use: an empty dir proves nothing, see gc.NetnsDirTrusted), then the chain
// breaks (the failplugin, with fail as its extra configuration, fails ADD
// and DEL) and a Deployment name of n pods starts, whose sandboxes kubelet
// retries, each retry leaking an address.
func startCrashLoop(t testing.TB, c *Cluster, ns, name string, n int, fail map[string]any) {
	t.Helper()
	apply(t, c, deployment(ns, "bystander", 1))
	waitPodsRunning(t, c, ns, 1)
	breakChain(t)
	if fail == nil {
		fail = map[string]any{}
	}
	if err := c.WriteConflist("10-hlk8s.conflist", chainConflist(PodSubnet, fail, nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		healChain()
		deleteNamespace(t, c, ns)
		restoreConflist(t, c)
	})
	apply(t, c, deployment(ns, name, n))
}

// restoreConflist puts the node's own conflist back (no failplugin).
func restoreConflist(t testing.TB, c *Cluster) {
	t.Helper()
	if err := c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil)); err != nil {
		t.Error(err)
	}
}

// setupHostlease builds the image from make build's binaries, imports it
// and writes the node's conflist (the plugin it names is installed by the
// DaemonSet's install-cni). An Instance node never runs the DaemonSet: it
// gets the conflist only.
func setupHostlease(c *Cluster) error {
	if Instance != "" {
		return c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil))
	}
	gcBin, err := harness.ProjectBin("hostlease-gc")
	if err != nil {
		return err
	}
	plugin, err := harness.ProjectBin("hostlease")
	if err != nil {
		return err
	}
	if err := importImage(c, Image, plugin, gcBin); err != nil {
		return err
	}
	return c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil))
}

// importImage builds the DaemonSet's image named name (hack/image.sh: the
// shell-less base layer, the plugin at /hostlease and the daemon at
// /hostlease-gc) and imports it into the node's containerd.
func importImage(c *Cluster, name, plugin, gcBin string) error {
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	tar := filepath.Join(Root, "image-"+strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	cmd := exec.Command("bash", filepath.Join(root, "hack", "image.sh"), "hostlease", name, tar, plugin, gcBin)
	cmd.Env = append(os.Environ(), "HOSTLEASE_IMAGE_CACHE="+filepath.Join(c.Art.Cache, "image-tool"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build image %s: %v: %s", name, err, out)
	}
	if out, err := c.Ctr("images", "import", tar); err != nil {
		return fmt.Errorf("import image %s: %v: %s", name, err, out)
	}
	return nil
}

// ensureInstalled applies the overlay (idempotent) and waits until the
// DaemonSet's pod is Ready.
func ensureInstalled(t testing.TB, c *Cluster) {
	t.Helper()
	requireDefaultNode(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl("apply", "-k", filepath.Join(root, "e2e", "k8s", "overlay")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitDaemonSetReady(t, c)
}

// requireDefaultNode fails a test that would install the DaemonSet on an
// Instance node: the overlay and helm-values.yaml name the default node's
// paths (Root is fixed for them), not the instance's.
func requireDefaultNode(t testing.TB) {
	t.Helper()
	if Instance != "" {
		t.Fatalf("%s installs the DaemonSet, whose overlay and Helm values name %s: run it on the default node, not instance %q (%s)",
			t.Name(), defaultRoot, Instance, Root)
	}
}

// waitDaemonSetReady waits until the DaemonSet's rollout is complete and its
// pod on the node is Ready.
func waitDaemonSetReady(t testing.TB, c *Cluster) {
	t.Helper()
	if out, err := c.Kubectl("-n", SysNamespace, "rollout", "status", "daemonset/"+DaemonSetName, "--timeout=3m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitUntil(t, 3*time.Minute, "DaemonSet hostlease-gc Ready on the node", func() (bool, string) {
		var ds *appsv1.DaemonSet
		err := c.read(func(ctx context.Context, cs kubernetes.Interface) (err error) {
			ds, err = cs.AppsV1().DaemonSets(SysNamespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
			return err
		})
		if err != nil {
			return false, err.Error()
		}
		st := ds.Status
		out := fmt.Sprintf("%d/%d/%d", st.DesiredNumberScheduled, st.NumberReady, st.UpdatedNumberScheduled)
		return out == "1/1/1", out
	})
}

// nodeReady reports the node's Ready condition status ("True"/"False") and reason.
func nodeReady(c *Cluster) (string, string) {
	n, err := c.node()
	if err != nil {
		return "", err.Error()
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return string(cond.Status), cond.Reason + " " + cond.Message
		}
	}
	return "", "no Ready condition"
}

func waitNodeReady(t testing.TB, c *Cluster) {
	t.Helper()
	waitUntil(t, 2*time.Minute, "node Ready", func() (bool, string) {
		st, why := nodeReady(c)
		return st == "True", st + " " + why
	})
}

// deployment is a Deployment of pause containers on the node's pod network.
func deployment(ns, name string, replicas int) string {
	return deploymentOf(ns, name, replicas, "")
}

// deploymentOf is deployment with the pods' RuntimeClass (one of
// RuntimeHandlers: its network instead of the node's; "": the default).
func deploymentOf(ns, name string, replicas int, runtimeClass string) string {
	rc := ""
	if runtimeClass != "" {
		rc = "\n      runtimeClassName: " + runtimeClass
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      terminationGracePeriodSeconds: 1%[6]s
      automountServiceAccountToken: false
      nodeSelector: {kubernetes.io/hostname: %[5]s}
      containers:
      - name: pause
        image: %[4]s
        imagePullPolicy: Never
`, ns, name, replicas, pauseImage(), NodeName, rc)
}

// deleteNamespace deletes ns and waits until it is gone and none of its
// sandboxes is READY in CRI any more (stopping a sandbox runs its DELs;
// kubelet removes stopped sandboxes later, in its minutely garbage
// collection, which nothing here needs).
func deleteNamespace(t testing.TB, c *Cluster, ns string) {
	t.Helper()
	t0 := time.Now()
	if _, err := c.Kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found"); err != nil {
		t.Errorf("delete namespace %s: %v", ns, err)
		return
	}
	// The bound judges the machine (a loaded node's kubelet and API server
	// deleting many pods); what would judge hostlease, a DEL that fails, is
	// named in the message: the pods left and the failure Events that blame
	// a network (blame.go).
	var described time.Time
	waitUntil(t, bringUpTimeout, "namespace "+ns+" gone", func() (bool, string) {
		if gone, _ := c.namespaceGone(ns); gone {
			return true, ""
		}
		if time.Since(described) < 15*time.Second {
			return false, ""
		}
		described = time.Now()
		return false, namespaceLeftovers(c, ns)
	})
	waitUntil(t, 2*time.Minute, "sandboxes of "+ns+" stopped", func() (bool, string) {
		sbs, err := c.Sandboxes()
		if err != nil {
			return false, err.Error()
		}
		for _, sb := range sbs {
			if sb.GetMetadata().GetNamespace() == ns && sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return false, "sandbox " + sb.Id + " " + sb.State.String()
			}
		}
		return true, ""
	})
	t.Logf("namespace %s deleted in %v", ns, time.Since(t0).Round(100*time.Millisecond))
}

// namespaceLeftovers describes what keeps a deleted namespace: its pods
// (name, phase) and the failure Events that blame a network or plugin.
func namespaceLeftovers(c *Cluster, ns string) string {
	pods, err := c.Kubectl("-n", ns, "get", "pods", "--no-headers", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase")
	if err != nil {
		pods = err.Error()
	}
	desc := "still there; pods: " + strings.Join(strings.Fields(pods), " ")
	out, err := c.Kubectl("-n", ns, "get", "events", "-o", "json")
	if err != nil {
		return desc
	}
	var list struct {
		Items []failureEvent `json:"items"`
	}
	if json.Unmarshal([]byte(out), &list) != nil {
		return desc
	}
	network, _ := splitBlame(list.Items)
	for _, ev := range network {
		desc += "; " + ev.Reason + ": " + ev.Message
	}
	return desc
}

// fileMode returns a file's mode or fails.
func fileMode(t testing.TB, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

// pauseImage is the image every test pod runs (imported with the node).
func pauseImage() string { return harness.PauseImage }
