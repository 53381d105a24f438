package k8s

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/e2e/harness"
)

var (
	podStartOut  = flag.String("podstart.out", "", "BenchmarkPodStart: write its report (markdown) to this file")
	podStartPods = flag.Int("podstart.pods", 110, "BenchmarkPodStart: pods created at once in each phase")
	podStartReps = flag.Int("podstart.reps", 3, "BenchmarkPodStart: repetitions; each runs every network once, in an order rotated every repetition")
	podStartNets = flag.String("podstart.networks", "host-local,hostlease",
		"BenchmarkPodStart: the networks compared, the first is the baseline of the ratios (of "+strings.Join(podStartNetworkNames(), ", ")+")")
)

// podStartNetwork is one network BenchmarkPodStart starts pods on: a
// runtime handler (and RuntimeClass) of the node with a CNI conf dir, bridge
// and /24 of its own.
type podStartNetwork struct {
	name    string // what the report calls it
	handler string // one of RuntimeHandlers; also the CNI network's name
	bridge  string
	subnet  string
}

// podStartNetworks: host-local, hostlease as the README's migration
// installs it (ipam swapped, the commit marker appended), and hostlease as
// the ipam alone (no marker: the marker's exec apart).
var podStartNetworks = []podStartNetwork{
	{"host-local", "hlk8s-ps-hl", "hlk8s-br8", "10.251.14.0/24"},
	{"hostlease", "hlk8s-ps-hs", "hlk8s-br9", "10.251.15.0/24"},
	{"hostlease-ipam-only", "hlk8s-ps-hsi", "hlk8s-br10", "10.251.16.0/24"},
}

func podStartNetworkNames() []string {
	var out []string
	for _, n := range podStartNetworks {
		out = append(out, n.name)
	}
	return out
}

// podStartHostLocalDir is host-local's dataDir for the bench.
var podStartHostLocalDir = filepath.Join(Root, "podstart-host-local")

const (
	podStartNS    = "bench-podstart"
	podStartLabel = "hostlease.e2e/podstart-phase" // value: the phase's ID
)

func (n podStartNetwork) ipam() string {
	if n.name == "host-local" {
		return "host-local"
	}
	return "hostlease"
}

// conflist is n's chain: [bridge(ipam)], plus the commit marker for
// "hostlease".
func (n podStartNetwork) conflist() []byte {
	ipam := map[string]any{"type": n.ipam(), "ranges": [][]map[string]string{{{"subnet": n.subnet}}}, "dataDir": CNIDataDir}
	if n.ipam() == "host-local" {
		ipam["dataDir"] = podStartHostLocalDir
	}
	plugins := []map[string]any{{"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipam": ipam}}
	if n.name == "hostlease" {
		plugins = append(plugins, map[string]any{"type": "hostlease", "dataDir": CNIDataDir})
	}
	return mustJSON(map[string]any{"cniVersion": "1.1.0", "name": n.handler, "plugins": plugins})
}

// held is how many addresses n's IPAM holds (hostlease: the store's records
// of the network; host-local: its reservation files).
func (n podStartNetwork) held(t testing.TB) int {
	if n.ipam() == "host-local" {
		return len(hostLocalHolders(t, podStartHostLocalDir, n.handler))
	}
	k := 0
	for _, r := range records(t) {
		if r.Network == n.handler {
			k++
		}
	}
	return k
}

// BenchmarkPodStart (make bench-k8s; not in make test): what a user feels
// of the IPAM when many pods start at once. On the one real node, phases of
// -podstart.pods (110, kubelet's default maxPods) bare pods created at once
// (pause, bound to the node: no scheduler), each phase on one network of
// -podstart.networks, each network once per repetition in an order rotated
// every repetition (AB BA AB ...: a drift of the machine's load over the run
// hits every network alike), after one unmeasured warm-up phase per
// network. The DaemonSet runs at its shipped settings throughout, as on a
// hostlease node. Per phase:
//   - time to Running of each pod: from the return of its Create call to
//     the first watch event with phase Running (both on the bench's clock);
//   - CNI ADD of each sandbox as containerd times it: its debug log's
//     "begin cni setup" to "cni result" of that sandbox, the span containerd
//     records in containerd_cri_network_plugin_operations_duration_seconds
//     {operation_type="set_up_pod"} (whose sum and count over the phase are
//     reported beside it, and tear_down_pod's for the DELs of the teardown);
//   - the batch: first Create to last Running.
//
// It fails only when a pod does not start or the IPAM's state is wrong
// (every pod's address held while they run, none after the teardown); the
// timings are reported, never asserted. The report gives p50/p99/max per
// network over every repetition, and each network's ratio to the baseline:
// over all repetitions, with the lowest and highest ratio of a single
// repetition.
func BenchmarkPodStart(b *testing.B) {
	c := cluster(b)
	var nets []podStartNetwork
	for _, name := range strings.Split(*podStartNets, ",") {
		i := podStartNetworkIndex(strings.TrimSpace(name))
		if i < 0 {
			b.Fatalf("-podstart.networks: unknown network %q (want some of %v)", name, podStartNetworkNames())
		}
		nets = append(nets, podStartNetworks[i])
	}
	if len(nets) < 2 || *podStartPods < 1 || *podStartReps < 1 {
		b.Fatalf("-podstart.networks needs two networks or more, -podstart.pods and -podstart.reps at least 1")
	}
	if *podStartPods > stormPoolSize {
		b.Fatalf("-podstart.pods %d: a /24 holds %d", *podStartPods, stormPoolSize)
	}
	ensureInstalled(b, c)
	waitNodeReady(b, c)
	cs := clientset(b, c)
	b.Cleanup(func() {
		deleteNamespace(b, c, podStartNS)
		for _, n := range nets {
			_, _ = c.Kubectl("delete", "runtimeclass", n.handler, "--ignore-not-found")
			_ = os.Remove(filepath.Join(RuntimeConfDir(n.handler), "10-"+n.handler+".conflist"))
			_ = os.Remove(filepath.Join(CNIDataDir, n.handler+".db"))
		}
		_ = os.RemoveAll(podStartHostLocalDir)
	})
	apply(b, c, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+podStartNS+"}\n")
	for _, n := range nets {
		if err := c.WriteConflistIn(RuntimeConfDir(n.handler), "10-"+n.handler+".conflist", n.conflist()); err != nil {
			b.Fatal(err)
		}
		apply(b, c, fmt.Sprintf("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: %s}\nhandler: %s\n", n.handler, n.handler))
	}
	waitUntil(b, time.Minute, "the default ServiceAccount of "+podStartNS, func() (bool, string) {
		_, err := c.Kubectl("-n", podStartNS, "get", "serviceaccount", "default")
		return err == nil, fmt.Sprint(err)
	})

	// Warm-up: the bridge, the store, the binaries' pages; not measured.
	for _, n := range nets {
		runPodStartPhase(b, c, cs, n, "warm-"+n.handler, 5)
	}
	b.ResetTimer()
	var phases []podStartPhase
	t0 := time.Now()
	for rep := range *podStartReps {
		for _, n := range rotated(nets, rep) {
			p := runPodStartPhase(b, c, cs, n, fmt.Sprintf("r%d-%s", rep, n.handler), *podStartPods)
			p.Rep = rep
			phases = append(phases, p)
			b.Logf("rep %d %s: time to Running p50 %v p99 %v max %v; CNI ADD p50 %v p99 %v max %v; load %s", rep, n.name,
				pct(p.ToRunning, 50), pct(p.ToRunning, 99), pct(p.ToRunning, 100), pct(p.Add, 50), pct(p.Add, 99), pct(p.Add, 100), p.Load)
		}
	}
	b.StopTimer()
	kubelet, _ := c.Kubectl("get", "node", NodeName, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}")
	r := podStartReport{Pods: *podStartPods, Reps: *podStartReps, Containerd: c.Art.Version.String(), Kubelet: kubelet,
		Took: time.Since(t0), Phases: phases}
	for _, n := range nets {
		r.Networks = append(r.Networks, n.name)
	}
	md := r.markdown()
	for _, n := range r.Networks[1:] {
		rr := r.ratios(n)
		b.ReportMetric(rr.RunP50.Pooled, n+"/"+r.Networks[0]+"-running-p50")
		b.ReportMetric(rr.RunP99.Pooled, n+"/"+r.Networks[0]+"-running-p99")
		b.ReportMetric(rr.AddP50.Pooled, n+"/"+r.Networks[0]+"-add-p50")
		b.ReportMetric(rr.AddP99.Pooled, n+"/"+r.Networks[0]+"-add-p99")
	}
	fmt.Fprint(os.Stderr, md)
	if *podStartOut != "" {
		if err := os.WriteFile(*podStartOut, []byte(md), 0o644); err != nil {
			b.Error(err)
		}
	}
}

func podStartNetworkIndex(name string) int {
	for i, n := range podStartNetworks {
		if n.name == name {
			return i
		}
	}
	return -1
}

// rotated is nets in the order of repetition rep: rotated left by rep (a
// Latin square over len(nets) repetitions; with two networks AB, BA, AB...).
func rotated[T any](nets []T, rep int) []T {
	out := make([]T, 0, len(nets))
	for i := range nets {
		out = append(out, nets[(i+rep)%len(nets)])
	}
	return out
}

// clientset is a client of the cluster as its admin, with no client-side
// rate limit (the bench creates its pods at once).
func clientset(t testing.TB, c *Cluster) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// podStartPhase is what one phase measured.
type podStartPhase struct {
	Network   string
	Rep       int
	ToRunning []time.Duration // per pod
	Add       []time.Duration // per sandbox, containerd's debug log
	Batch     time.Duration   // first Create to last Running
	Sandboxes int             // sandboxes the phase's pods got (more than pods: retries)
	// containerd's network_plugin_operations_duration_seconds over the
	// phase: ADDs (set_up_pod) while the pods started, DELs (tear_down_pod)
	// while they were deleted.
	MetricAdd, MetricDel histDelta
	Load                 string // /proc/loadavg's 1, 5, 15 min at the phase's start
}

// runPodStartPhase creates pods pods on network n at once, waits until all
// run, measures, deletes them and waits until the IPAM holds nothing.
func runPodStartPhase(t testing.TB, c *Cluster, cs kubernetes.Interface, n podStartNetwork, id string, pods int) podStartPhase {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := podStartPhase{Network: n.name, Load: loadAvg()}
	if h := n.held(t); h != 0 {
		t.Fatalf("%s: %s holds %d addresses before the phase, want 0", id, n.name, h)
	}
	selector := podStartLabel + "=" + id

	var mu sync.Mutex
	running := map[string]time.Time{}
	observe := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Status.Phase != corev1.PodRunning {
			return
		}
		now := time.Now()
		mu.Lock()
		if _, seen := running[pod.Name]; !seen {
			running[pod.Name] = now
		}
		mu.Unlock()
	}
	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", podStartNS,
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatalf("%s: pod watch not synced", id)
	}

	containerdLog := filepath.Join(LogDir, "containerd.log")
	logOff := logSize(containerdLog)
	before := containerdMetrics(t)

	created := make([]time.Time, pods)
	errs := make([]error, pods)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range pods {
		wg.Go(func() {
			_, errs[i] = cs.CoreV1().Pods(podStartNS).Create(ctx, podStartPod(n, id, i), metav1.CreateOptions{})
			created[i] = time.Now()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: create pod %d: %v", id, i, err)
		}
	}
	waitUntil(t, 10*time.Minute, id+": "+itoa(pods)+" pods Running", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(running) == pods, itoa(len(running)) + " Running"
	})
	after := containerdMetrics(t)
	mu.Lock()
	last := start
	for i := range pods {
		at := running[podStartPodName(id, i)]
		p.ToRunning = append(p.ToRunning, max(0, at.Sub(created[i])))
		last = later(last, at)
	}
	mu.Unlock()
	p.Batch = last.Sub(start)
	p.MetricAdd = metricDelta(before, after, "set_up_pod")

	// The CNI ADDs of the phase's sandboxes (CRI copies the pod's labels).
	sandboxes := podStartSandboxes(t, id)
	p.Sandboxes = len(sandboxes)
	logText, _ := logSince(containerdLog, logOff)
	adds := parseCNIAdds(logText)
	for sb := range sandboxes {
		if d, ok := adds[sb]; ok {
			p.Add = append(p.Add, d)
		}
	}
	if len(p.Add) < pods {
		t.Fatalf("%s: containerd's log times %d CNI ADDs of the phase's %d sandboxes, want at least %d (one per pod)", id, len(p.Add), len(sandboxes), pods)
	}
	if h := n.held(t); h != pods {
		t.Fatalf("%s: %s holds %d addresses with %d pods running, want %d", id, n.name, h, pods, pods)
	}

	// Teardown: every pod deleted (kubelet stops its sandbox: the DELs),
	// the sandboxes removed, nothing held.
	if err := cs.CoreV1().Pods(podStartNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		t.Fatalf("%s: delete pods: %v", id, err)
	}
	waitUntil(t, 10*time.Minute, id+": pods gone", func() (bool, string) {
		l, err := cs.CoreV1().Pods(podStartNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, itoa(len(l.Items)) + " left"
	})
	waitUntil(t, 5*time.Minute, id+": sandboxes stopped", func() (bool, string) {
		ready := 0
		for _, st := range podStartSandboxes(t, id) {
			if st == runtimeapi.PodSandboxState_SANDBOX_READY {
				ready++
			}
		}
		return ready == 0, itoa(ready) + " READY"
	})
	p.MetricDel = metricDelta(after, containerdMetrics(t), "tear_down_pod")
	for sb := range podStartSandboxes(t, id) {
		if err := c.stopRemoveSandbox(sb); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Logf("%s: remove sandbox %s: %v", id, sb, err)
		}
	}
	waitUntil(t, 2*time.Minute, id+": "+n.name+" holds nothing", func() (bool, string) {
		h := n.held(t)
		return h == 0, itoa(h) + " held"
	})
	return p
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func podStartPodName(id string, i int) string { return fmt.Sprintf("%s-%03d", id, i) }

// podStartPod is pod i of phase id: pause, bound to the node, on n's
// RuntimeClass.
func podStartPod(n podStartNetwork, id string, i int) *corev1.Pod {
	grace, no := int64(1), false
	handler := n.handler
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podStartPodName(id, i), Namespace: podStartNS, Labels: map[string]string{podStartLabel: id}},
		Spec: corev1.PodSpec{
			NodeName: NodeName, RuntimeClassName: &handler,
			TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			Containers: []corev1.Container{{Name: "pause", Image: pauseImage(), ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// podStartSandboxes is every sandbox of phase id that CRI lists, with its
// state.
func podStartSandboxes(t testing.TB, id string) map[string]runtimeapi.PodSandboxState {
	t.Helper()
	out := map[string]runtimeapi.PodSandboxState{}
	err := cri(func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		r, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{podStartLabel: id}}})
		for _, sb := range r.GetItems() {
			out[sb.Id] = sb.State
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// containerdMetrics scrapes the node's containerd.
func containerdMetrics(t testing.TB) harness.MetricSet {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", ContainerdMetricsPort))
	if err != nil {
		t.Fatalf("containerd metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("containerd metrics: %v %s", err, resp.Status)
	}
	m, err := harness.ParseMetrics(string(body))
	if err != nil {
		t.Fatalf("containerd metrics: %v", err)
	}
	return m
}
