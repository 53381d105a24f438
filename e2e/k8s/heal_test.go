package k8s

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/e2e/harness"
)

// healLoop is one #12130 loop of TestRetriesHealWithoutDaemon: a Deployment
// of pods whose chain [bridge(ipam), failplugin, (marker)] fails ADD and
// DEL, on a network of its own (its RuntimeClass's conf dir, bridge, /24).
type healLoop struct {
	net    string // network name = runtime handler = RuntimeClass
	ns     string
	ipam   string // "hostlease" or "host-local"
	bridge string
	subnet string
	pods   int
	window time.Duration // judged (sampled) for this long from the start

	// measured
	maxPerPod   int            // most addresses one pod held at one sample
	perPodMax   map[string]int // pod UID -> most it held at one sample
	poolMax     int            // most addresses of the /24 held at one sample
	samples     int
	attempts    int           // sandboxes that got an address, then failed (failplugin's log)
	fullAfter   time.Duration // first sample with the /24 full, from the start (0: never)
	exhausted   []string
	unknownHeld int // host-local files of sandboxes not (yet) in the failplugin's log, at most at one sample
}

func (l *healLoop) failLog() string { return filepath.Join(Root, "heal-"+l.net+".log") }

// Trigger files of the loops' failplugins (not the node network's: the
// other scenarios' FailAddFile/FailDelFile are untouched).
var (
	healFailAdd  = filepath.Join(Root, "heal-fail-add")
	healFailDel  = filepath.Join(Root, "heal-fail-del")
	hostLocalDir = filepath.Join(Root, "heal-host-local")
)

// TestRetriesHealWithoutDaemon (issue 18's real-node proof): with no
// hostlease-gc anywhere (no DaemonSet; the plugin installed by
// `hostlease-gc install-cni` run once on the host), kubelet's own retries of
// containerd #12130, side by side on four networks of their own:
//   - two pods in the loop for 3 minutes with hostlease hold at most one
//     address each at every sample (the store's records per pod UID, every
//     3 s); the same loop with host-local holds one more address per retry
//     (asserted: at least 2 for some pod, else the loop proved nothing);
//   - 50 pods in the loop on a /24 for 5 minutes with hostlease never exhaust
//     the pool: no "no IP addresses available" in containerd's or kubelet's
//     log or in the namespace's Events, the store's exhaustion count 0, the
//     pool usage sampled below its 253; host-local's figure beside it.
//
// The pair loops run concurrently with the storms (the whole test takes the
// storm's 5 minutes plus setup and teardown). HOSTLEASE_HEAL_STORM_PODS and
// HOSTLEASE_HEAL_DURATION shorten it for a try (logged as such).
func TestRetriesHealWithoutDaemon(t *testing.T) {
	c := cluster(t)
	t0 := time.Now()
	stormPods, stormFor, pairFor := 50, 5*time.Minute, 3*time.Minute
	if v, err := strconv.Atoi(os.Getenv("HOSTLEASE_HEAL_STORM_PODS")); err == nil && v > 0 {
		stormPods = v
		t.Logf("HOSTLEASE_HEAL_STORM_PODS: storm of %d pods (not the proof's 50)", v)
	}
	if v, err := time.ParseDuration(os.Getenv("HOSTLEASE_HEAL_DURATION")); err == nil && v > 0 {
		stormFor, pairFor = v, min(v, pairFor)
		t.Logf("HOSTLEASE_HEAL_DURATION: storm for %v, pairs for %v (not the proof's 5 and 3 minutes)", stormFor, pairFor)
	}
	loops := []*healLoop{
		{net: "hlk8s-hs-pair", ns: "heal-hs-pair", ipam: "hostlease", bridge: "hlk8s-br6", subnet: "10.251.12.0/24", pods: 2, window: pairFor},
		{net: "hlk8s-hl-pair", ns: "heal-hl-pair", ipam: "host-local", bridge: "hlk8s-br4", subnet: "10.251.10.0/24", pods: 2, window: pairFor},
		{net: "hlk8s-hs-storm", ns: "heal-hs-storm", ipam: "hostlease", bridge: "hlk8s-br7", subnet: "10.251.13.0/24", pods: stormPods, window: stormFor},
		{net: "hlk8s-hl-storm", ns: "heal-hl-storm", ipam: "host-local", bridge: "hlk8s-br5", subnet: "10.251.11.0/24", pods: stormPods, window: stormFor},
	}

	uninstallDaemon(t, c)
	assertNoDaemon(t, c)
	// The plugin, installed as an operator without the DaemonSet would.
	if out, err := runGC("install-cni", "--from="+mustProjectBin(t, "hostlease"), "--to="+CNIBinDir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitNodeReady(t, c)

	const bystanderNS = "heal-bystander"
	t.Cleanup(func() {
		os.Remove(healFailAdd)
		os.Remove(healFailDel)
		var nss []string
		for _, l := range loops {
			nss = append(nss, l.ns)
		}
		nss = append(nss, bystanderNS)
		// Deleted together, then waited for one by one.
		_, _ = c.Kubectl(append([]string{"delete", "namespace", "--wait=false", "--ignore-not-found"}, nss...)...)
		for _, ns := range nss {
			deleteNamespace(t, c, ns)
		}
		for _, l := range loops {
			_, _ = c.Kubectl("delete", "runtimeclass", l.net, "--ignore-not-found")
			os.Remove(l.failLog())
			os.Remove(filepath.Join(CNIDataDir, l.net+".db"))
		}
		os.RemoveAll(hostLocalDir)
	})
	// A pod runs on the node (its netns keeps the runtime's netns dir in
	// use, as on any node), then the loops' chains break.
	apply(t, c, deployment(bystanderNS, "bystander", 1))
	waitPodsRunning(t, c, bystanderNS, 1)
	for _, f := range []string{healFailAdd, healFailDel} {
		if err := os.WriteFile(f, []byte("e2e: chain broken on purpose\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range loops {
		os.Remove(l.failLog())
		if err := c.WriteConflistIn(RuntimeConfDir(l.net), "10-"+l.net+".conflist", healConflist(l)); err != nil {
			t.Fatal(err)
		}
		apply(t, c, fmt.Sprintf("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: %s}\nhandler: %s\n", l.net, l.net))
	}
	containerdLog, kubeletLog := filepath.Join(LogDir, "containerd.log"), filepath.Join(LogDir, "kubelet.log")
	containerdOff, kubeletOff := logSize(containerdLog), logSize(kubeletLog)
	start := time.Now()
	for _, l := range loops {
		apply(t, c, deploymentOf(l.ns, "loop", l.pods, l.net))
	}

	// Sample every 3 s until the storm's end: the addresses each pod holds
	// (hostlease: its records by pod UID; host-local: its files, by the
	// sandbox's pod UID from the failplugin's log) and the pool's usage.
	for _, l := range loops {
		l.perPodMax = map[string]int{}
	}
	for time.Since(start) < stormFor {
		if who, err := daemonRunning(c); err != nil || who != "" {
			t.Errorf("hostlease-gc on the node during the loops: %s %v", who, err)
		}
		recs := records(t)
		for _, l := range loops {
			if time.Since(start) > l.window {
				continue
			}
			perPod, held, unknown := map[string]int{}, 0, 0
			if l.ipam == "hostlease" {
				for _, r := range recs {
					if r.Network == l.net {
						held++
						perPod[r.PodUID]++
					}
				}
			} else {
				uids := sandboxPods(t, l.failLog())
				for _, id := range hostLocalHolders(t, hostLocalDir, l.net) {
					held++
					if uid, ok := uids[id]; ok {
						perPod[uid]++
					} else {
						unknown++ // its ADD has not returned yet
					}
				}
			}
			l.samples++
			l.poolMax = max(l.poolMax, held)
			if held >= stormPoolSize && l.fullAfter == 0 {
				l.fullAfter = time.Since(start)
			}
			l.unknownHeld = max(l.unknownHeld, unknown)
			for uid, n := range perPod {
				l.perPodMax[uid] = max(l.perPodMax[uid], n)
				l.maxPerPod = max(l.maxPerPod, n)
			}
		}
		time.Sleep(3 * time.Second) // the sampling period
	}
	end := time.Now()
	assertNoDaemon(t, c)

	// Exhaustion, as an operator sees it: containerd's and kubelet's logs,
	// the namespace's Events, the store's count.
	clog, _ := logSince(containerdLog, containerdOff)
	klog, _ := logSince(kubeletLog, kubeletOff)
	for _, l := range loops {
		l.attempts = len(sandboxPods(t, l.failLog()))
		for name, log := range map[string]string{"containerd": clog, "kubelet": klog} {
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, "no IP addresses available") && (strings.Contains(line, l.net) || strings.Contains(line, l.ns+"/")) {
					l.exhausted = append(l.exhausted, name+": "+line)
				}
			}
		}
		if out, err := c.Kubectl("-n", l.ns, "get", "events", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"); err == nil {
			for _, m := range strings.Split(out, "\n") {
				if strings.Contains(m, "no IP addresses available") {
					l.exhausted = append(l.exhausted, "Event: "+m)
				}
			}
		}
		if l.ipam == "hostlease" {
			if n := networkExhaustions(t, l.net); n > 0 {
				l.exhausted = append(l.exhausted, fmt.Sprintf("store: %d exhaustions", n))
			}
		}
	}

	// The table, one log line a row (make e2e-k8s's summary keeps them).
	t.Logf("#12130 through kubelet with no hostlease-gc on the node (containerd %s), loops side by side:", c.Art.Version)
	t.Logf("| loop | IPAM | pods | sampled for | sandboxes that got an address and failed | most addresses held by one pod at a sample | pool usage max (of %d) | exhausted |", stormPoolSize)
	t.Logf("|---|---|---|---|---|---|---|---|")
	for _, l := range loops {
		ex := "no"
		if len(l.exhausted) > 0 {
			ex = fmt.Sprintf("yes (%d log lines and Events", len(l.exhausted))
			if l.fullAfter > 0 {
				ex += fmt.Sprintf("; full after %v", l.fullAfter.Round(time.Second))
			}
			ex += ")"
		}
		t.Logf("| %s | %s | %d | %v (%d samples) | %d | %d | %d | %s |", l.net, l.ipam, l.pods,
			min(l.window, end.Sub(start)).Round(time.Second), l.samples, l.attempts, l.maxPerPod, l.poolMax, ex)
	}
	for _, l := range loops {
		if l.attempts < l.pods {
			t.Errorf("%s: %d failed sandboxes for %d pods: the failing chain did not reproduce #12130", l.net, l.attempts, l.pods)
		}
		switch {
		case l.ipam == "host-local" && l.pods == 2 && l.maxPerPod < 2:
			t.Errorf("%s: host-local held at most %d address per pod: the loop did not retry, so it proves nothing about hostlease", l.net, l.maxPerPod)
		case l.ipam == "hostlease" && l.pods == 2:
			for uid, n := range l.perPodMax {
				if n > 1 {
					t.Errorf("%s: pod %s held %d addresses at one sample, want at most 1 (its retries piled up)", l.net, uid, n)
				}
			}
		}
		if l.ipam == "hostlease" {
			if len(l.exhausted) > 0 {
				t.Errorf("%s: the pool ran dry %d times, e.g. %s", l.net, len(l.exhausted), truncateLines(l.exhausted[0], 400))
			}
			if l.poolMax >= stormPoolSize {
				t.Errorf("%s: %d addresses held at one sample: the /24 was full", l.net, l.poolMax)
			}
		}
	}
	t.Logf("loops ran %v; the test took %v so far", end.Sub(start).Round(time.Second), time.Since(t0).Round(time.Second))
}

// healConflist is loop l's conflist: [bridge(ipam l.ipam), failplugin
// (healFailAdd/healFailDel, its log), hostlease marker (hostlease only)].
func healConflist(l *healLoop) []byte {
	ipam := map[string]any{"type": l.ipam, "ranges": [][]map[string]string{{{"subnet": l.subnet}}}, "dataDir": CNIDataDir}
	if l.ipam == "host-local" {
		ipam["dataDir"] = hostLocalDir
	}
	plugins := []map[string]any{
		{"type": "bridge", "bridge": l.bridge, "isGateway": true, "ipam": ipam},
		{"type": "failplugin", "failAddFile": healFailAdd, "failDelFile": healFailDel, "logFile": l.failLog()},
	}
	if l.ipam == "hostlease" {
		plugins = append(plugins, map[string]any{"type": "hostlease", "dataDir": CNIDataDir})
	}
	return mustJSON(map[string]any{"cniVersion": "1.1.0", "name": l.net, "plugins": plugins})
}

// sandboxPods maps each sandbox whose ADD failed, from a failplugin's log,
// to its pod's UID (K8S_POD_UID of its CNI_ARGS).
func sandboxPods(t testing.TB, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct{ Verb, ContainerID, Args, Error string }
		if json.Unmarshal(sc.Bytes(), &l) != nil || !strings.EqualFold(l.Verb, "ADD") || l.Error == "" {
			continue
		}
		for _, kv := range strings.Split(l.Args, ";") {
			if uid, ok := strings.CutPrefix(kv, "K8S_POD_UID="); ok {
				out[l.ContainerID] = uid
			}
		}
	}
	return out
}

// hostLocalHolders is the sandbox of every address host-local holds on
// network net in its dataDir dir (its files <dir>/<net>/<ip>: container
// ID, then interface).
func hostLocalHolders(t testing.TB, dir, net string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, net))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err != nil {
			continue // last_reserved_ip.0, lock
		}
		b, err := os.ReadFile(filepath.Join(dir, net, e.Name()))
		if err != nil {
			continue // released meanwhile
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		ids = append(ids, strings.TrimSpace(id))
	}
	return ids
}

// networkExhaustions is network net's exhaustion count (hostlease-gc status).
func networkExhaustions(t testing.TB, net string) uint64 {
	t.Helper()
	out, err := runGC("status", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", CNIDataDir)
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Network     string
		Exhaustions uint64
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	var n uint64
	for _, r := range rows {
		if r.Network == net {
			n += r.Exhaustions
		}
	}
	return n
}

// uninstallDaemon deletes what the overlay installed (when an earlier test
// installed it) and waits until its namespace is gone; the next test that
// needs the DaemonSet installs it again (ensureInstalled).
func uninstallDaemon(t testing.TB, c *Cluster) {
	t.Helper()
	if _, err := c.Kubectl("get", "namespace", SysNamespace); err != nil {
		return
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl("delete", "-k", filepath.Join(root, "e2e", "k8s", "overlay"), "--ignore-not-found", "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitUntil(t, 3*time.Minute, "namespace "+SysNamespace+" gone", func() (bool, string) {
		gone, err := c.namespaceGone(SysNamespace)
		return gone, fmt.Sprint("still there ", err)
	})
	waitUntil(t, 2*time.Minute, "no hostlease-gc container on the node", func() (bool, string) {
		who, err := daemonRunning(c)
		return err == nil && who == "", who
	})
}

// assertNoDaemon fails unless no DaemonSet named hostlease-gc exists in any
// namespace and the node runs no hostlease-gc container.
func assertNoDaemon(t testing.TB, c *Cluster) {
	t.Helper()
	out, err := c.Kubectl("get", "daemonsets", "-A", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, DaemonSetName) {
		t.Fatalf("DaemonSets on the cluster: %s; want no %s", out, DaemonSetName)
	}
	if who, err := daemonRunning(c); err != nil || who != "" {
		t.Fatalf("hostlease-gc on the node: %s %v", who, err)
	}
}

// daemonRunning names the node's containers called hostlease-gc in any state
// but exited ("" when there is none), as CRI lists them.
func daemonRunning(c *Cluster) (string, error) {
	var who []string
	err := cri(func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		r, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"io.kubernetes.container.name": DaemonSetName}}})
		for _, ct := range r.GetContainers() {
			if ct.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				who = append(who, ct.Labels["io.kubernetes.pod.namespace"]+"/"+ct.Labels["io.kubernetes.pod.name"]+" "+ct.State.String())
			}
		}
		return err
	})
	sort.Strings(who)
	return strings.Join(who, ", "), err
}
