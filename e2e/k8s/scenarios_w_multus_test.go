package k8s

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// Multus (thin plugin, hack/multus-setup.sh) as the node's CNI: its conf
// sorts before the node's own conflist, so containerd gives every pod to
// Multus, which delegates eth0 to the cluster network (the node's own chain
// [bridge(hostlease), failplugin (logging only), marker], same network and
// store as without Multus) and net1 to the NetworkAttachmentDefinitions a pod
// names in k8s.v1.cni.cncf.io/networks. Each NAD is a chain [bridge
// (hostlease), failplugin, marker] on a bridge and /24 of its own.
const (
	multusConfName  = "00-multus.conflist"
	multusNamespace = "e2e-multus"
	nadName         = "hlk8s-nad"      // the secondary network of TwoNetworks and CacheAtDel
	nadBridge       = "hlk8s-br8"      // its bridge
	nadSubnet       = "10.251.20.0/24" // its pool
	nadLoopName     = "hlk8s-nad-loop" // the secondary network of SecondaryLoop (triggers of its own)
	nadLoopBridge   = "hlk8s-br9"
	nadLoopSubnet   = "10.251.21.0/24"
	nadCRDName      = "network-attachment-definitions.k8s.cni.cncf.io"
)

// Paths of the Multus setup, under Root.
var (
	multusDir        = filepath.Join(Root, "multus")
	multusCacheDir   = filepath.Join(multusDir, "cache") // Multus's cniDir: <sandbox ID> files and results/
	multusClusterNet = filepath.Join(multusDir, "cluster.conflist")
	multusLog        = filepath.Join(LogDir, "multus.log")
	multusClusterLog = filepath.Join(Root, "multus-cluster-calls.log") // the cluster chain's failplugin
	nadCallsLog      = filepath.Join(Root, "multus-nad-calls.log")     // hlk8s-nad's failplugin
	nadLoopCallsLog  = filepath.Join(Root, "multus-nad-loop-calls.log")
	nadHoldAdd       = filepath.Join(Root, "trigger-nad-hold-add")
	nadFailAdd       = filepath.Join(Root, "trigger-nad-fail-add")
	nadLoopFailAdd   = filepath.Join(Root, "trigger-nad-loop-fail-add")
	nadLoopFailDel   = filepath.Join(Root, "trigger-nad-loop-fail-del")
)

// MultusCacheDir is ${HOSTLEASE_MULTUS_CACHE:-/var/cache/hostlease-multus}.
func MultusCacheDir() string {
	if d := os.Getenv("HOSTLEASE_MULTUS_CACHE"); d != "" {
		return d
	}
	return "/var/cache/hostlease-multus"
}

// ensureMultus runs hack/multus-setup.sh (a stamp check when cached) and
// returns the cache dir (bin/multus, crd.yaml).
func ensureMultus(t testing.TB) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("HOSTLEASE_E2E_SKIP_SETUP") == "" {
		cmd := exec.Command("bash", filepath.Join(root, "hack", "multus-setup.sh"))
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("hack/multus-setup.sh: %v\n%s", err, out)
		}
	}
	d := MultusCacheDir()
	for _, f := range []string{"bin/multus", "crd.yaml"} {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			t.Fatalf("Multus artifact missing (run hack/multus-setup.sh as root): %v", err)
		}
	}
	return d
}

// nadChain is a NAD's conflist: [bridge(ipam hostlease), failplugin (its
// triggers and call log; it declares the capabilities Multus can inject, so
// the log shows what Multus passes), hostlease marker].
func nadChain(name, bridge, subnet string, fail map[string]any) []byte {
	fp := map[string]any{"type": "failplugin",
		"capabilities": map[string]bool{"ips": true, "mac": true, "portMappings": true, "bandwidth": true}}
	for k, v := range fail {
		fp[k] = v
	}
	return mustJSON(map[string]any{"cniVersion": "1.1.0", "name": name, "plugins": []map[string]any{
		{"type": "bridge", "bridge": bridge, "ipam": map[string]any{
			"type": "hostlease", "ranges": [][]map[string]string{{{"subnet": subnet}}}, "dataDir": CNIDataDir}},
		fp,
		{"type": "hostlease", "dataDir": CNIDataDir},
	}})
}

// nadManifest is a NetworkAttachmentDefinition of conf in ns.
func nadManifest(ns, name string, conf []byte) string {
	return fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: %s, namespace: %s}
spec:
  config: '%s'
`, name, ns, strings.ReplaceAll(string(conf), "'", "''"))
}

// multusDeployment is deployment (its namespace, then pause pods) with the
// pods attached to nad as well.
func multusDeployment(ns, name string, replicas int, nad string) string {
	const key = "k8s.v1.cni.cncf.io/networks"
	out := strings.Replace(deployment(ns, name, replicas),
		"    metadata: {labels: {app: "+name+"}}\n",
		"    metadata:\n      labels: {app: "+name+"}\n      annotations: {"+key+": "+nad+"}\n", 1)
	if !strings.Contains(out, key) {
		panic("multusDeployment: the pod template of deployment() no longer has the line it annotates")
	}
	return out
}

// setupMultus makes Multus the node's CNI for the rest of the test: the
// binary in the CNI bin dir, the CRD from the module's manifest, the cluster
// network's conflist, the Multus conf sorting first in the conf dir, the
// namespace and both NADs. Undone at the end of the test, pods first (their
// DELs go through Multus), then the conf.
func setupMultus(t *testing.T, c *Cluster) {
	t.Helper()
	cache := ensureMultus(t)
	if err := os.MkdirAll(multusCacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := harness.CopyExecutable(filepath.Join(cache, "bin", "multus"), filepath.Join(CNIBinDir, "multus")); err != nil {
		t.Fatal(err)
	}
	crd, err := os.ReadFile(filepath.Join(cache, "crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, c, string(crd))
	kubectl(t, c, "wait", "--for=condition=established", "--timeout=60s", "crd/"+nadCRDName)
	for _, f := range []string{multusClusterLog, nadCallsLog, nadLoopCallsLog, multusLog} {
		os.Remove(f)
	}
	cluster := mustJSON(map[string]any{"cniVersion": "1.1.0", "name": PodNetwork, "plugins": []map[string]any{
		{"type": "bridge", "bridge": PodBridge, "isGateway": true, "ipam": map[string]any{
			"type": "hostlease", "ranges": [][]map[string]string{{{"subnet": PodSubnet}}}, "dataDir": CNIDataDir}},
		{"type": "failplugin", "logFile": multusClusterLog},
		{"type": "hostlease", "dataDir": CNIDataDir},
	}})
	if err := os.WriteFile(multusClusterNet, cluster, 0o644); err != nil {
		t.Fatal(err)
	}
	// The NADs' bridges and networks are torn down with the node's.
	c.bridges = append(c.bridges, nadBridge, nadLoopBridge)
	c.networks = append(c.networks, nadName, nadLoopName)
	conf := mustJSON(map[string]any{"cniVersion": "1.1.0", "name": "multus-cni-network", "plugins": []map[string]any{{
		"type":           "multus",
		"kubeconfig":     c.Kubeconfig,
		"clusterNetwork": multusClusterNet,
		"cniDir":         multusCacheDir,
		"binDir":         CNIBinDir,
		"logFile":        multusLog,
		"logLevel":       "verbose",
		"logToStderr":    false,
	}}})
	t.Cleanup(func() {
		for _, f := range []string{nadHoldAdd, nadFailAdd, nadLoopFailAdd, nadLoopFailDel} {
			os.Remove(f)
		}
		deleteNamespace(t, c, multusNamespace)
		if err := os.Remove(filepath.Join(CNIConfDir, multusConfName)); err != nil {
			t.Error(err)
		}
		for _, n := range []string{nadName, nadLoopName} {
			os.Remove(filepath.Join(CNIDataDir, n+".db"))
		}
		_, _ = c.Kubectl("delete", "crd", nadCRDName, "--ignore-not-found")
	})
	if err := c.WriteConflist(multusConfName, conf); err != nil {
		t.Fatal(err)
	}
	apply(t, c, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+multusNamespace+"}\n")
	apply(t, c, nadManifest(multusNamespace, nadName, nadChain(nadName, nadBridge, nadSubnet,
		map[string]any{"holdAddFile": nadHoldAdd, "failAddFile": nadFailAdd, "logFile": nadCallsLog})))
	apply(t, c, nadManifest(multusNamespace, nadLoopName, nadChain(nadLoopName, nadLoopBridge, nadLoopSubnet,
		map[string]any{"failAddFile": nadLoopFailAdd, "failDelFile": nadLoopFailDel, "logFile": nadLoopCallsLog})))
	waitNodeReady(t, c)
}

// TestMultus: Multus v4.3.0 (thin) as the node's CNI, hostlease the IPAM of
// its cluster network and of secondary networks (NADs).
//   - TwoNetworks: pods with eth0 and net1 hold one committed record on each
//     network, naming their pod (namespace, name, UID from the CNI_ARGS
//     Multus passes) and their netns under the runtime's netns dir; net1's
//     address is the one Multus reports in network-status and the one on the
//     pod's net1. What Multus passed each delegate (CNI_ARGS, ifname, netns,
//     runtimeConfig) is logged. They keep running through the other cases,
//     across DaemonSet reinstalls and many sweeps; at the end, neither of
//     their records was ever reclaimed and the daemon exports both
//     networks' pools.
//   - Without the DaemonSet (uninstalled), side by side:
//     SecondaryLoop: the #12130 loop on a NAD (its failplugin fails ADD and
//     DEL): Multus's ADD fails, its DEL of the NAD's chain stops at the
//     failplugin, kubelet retries; every pod holds at most one address of
//     that network at every sample (the plugin releases the previous
//     sandbox's at the next ADD: pod-UID heal, through Multus's CNI_ARGS).
//     CacheAtDel: a pod whose Multus cache entry is deleted, one whose entry
//     is corrupt, and one whose ADD never completed (held in the NAD's chain,
//     cache entry deleted, pod deleted, then the ADD fails): every pod goes,
//     its sandbox is stopped and removed, no DEL fails (containerd's and
//     Multus's logs).
//   - Then the DaemonSet again: nothing of the loop's or CacheAtDel's pods
//     stays held.
func TestMultus(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	start := time.Now()
	setupMultus(t, c)
	containerdLog := filepath.Join(LogDir, "containerd.log")
	containerdOff := logSize(containerdLog)

	var live []multusPod
	t.Run("TwoNetworks", func(t *testing.T) {
		apply(t, c, multusDeployment(multusNamespace, "two", 2, nadName))
		live = waitMultusPods(t, c, "two", 2)
		checkDelegation(t, live)
		for _, p := range live {
			checkNet1(t, c, p)
		}
	})
	if t.Failed() {
		return
	}

	uninstallDaemon(t, c)
	assertNoDaemon(t, c)
	var wg sync.WaitGroup
	var loopPods, cachePods []string // pod UIDs whose records must all go
	var loopMu sync.Mutex
	wg.Add(2)
	go func() {
		defer wg.Done()
		t.Run("SecondaryLoop", func(t *testing.T) {
			uids := secondaryLoop(t, c)
			loopMu.Lock()
			loopPods = uids
			loopMu.Unlock()
		})
	}()
	go func() {
		defer wg.Done()
		t.Run("CacheAtDel", func(t *testing.T) {
			uids := cacheAtDel(t, c, containerdLog, containerdOff)
			loopMu.Lock()
			cachePods = uids
			loopMu.Unlock()
		})
	}()
	wg.Wait()

	t.Run("DaemonSweeps", func(t *testing.T) {
		ensureInstalled(t, c)
		gone := map[string]bool{}
		for _, u := range append(loopPods, cachePods...) {
			gone[u] = true
		}
		waitUntil(t, 3*time.Minute, "no address held for the deleted pods", func() (bool, string) {
			for _, r := range records(t) {
				if gone[r.PodUID] {
					return false, r.Network + " " + r.IP.String() + " of " + r.PodName + " (" + r.Obs.Verdict + ")"
				}
			}
			return true, ""
		})
		// The running pods: both records as at the start, never reclaimed.
		byKey := map[string]allocator.Record{}
		for _, r := range records(t) {
			byKey[r.Network+" "+r.ContainerID+" "+r.IfName] = r
		}
		for _, p := range live {
			for _, want := range []allocator.Record{p.eth0, p.net1} {
				got, ok := byKey[want.Network+" "+want.ContainerID+" "+want.IfName]
				if !ok || got.IP != want.IP || got.State != allocator.StateCommitted {
					t.Errorf("pod %s lost its %s record %s on %s (now %+v)", p.Name, want.IfName, want.IP, want.Network, got)
				}
			}
		}
		running := map[string]bool{}
		for _, p := range live {
			running[p.eth0.ContainerID] = true
		}
		for _, ev := range auditLog(t) {
			if !ev.Time.Before(start) && running[ev.ContainerID] {
				t.Errorf("audit: %s of %s (%s, %s) while its pod runs", ev.Action, ev.IP, ev.IfName, ev.Reason)
			}
		}
		// The daemon exports both networks of the running pods.
		out := kubectl(t, c, "get", "--raw", "/api/v1/namespaces/"+SysNamespace+"/pods/"+gcPod(t, c)+":19734/proxy/metrics")
		for _, n := range []string{PodNetwork, nadName} {
			if !strings.Contains(out, `hostlease_allocations{network="`+n+`",state="committed"}`) {
				t.Errorf("no hostlease_allocations{network=%q,state=committed} in /metrics:\n%s", n, grepLines(out, "hostlease_allocations"))
			}
		}
		if pods := runningPods(t, c, multusNamespace); len(pods) < len(live) {
			t.Errorf("%d pods of %s running at the end, want the %d of TwoNetworks", len(pods), multusNamespace, len(live))
		}
	})
}

// multusPod is a running pod with its two records.
type multusPod struct {
	podInfo
	eth0, net1 allocator.Record
}

// waitMultusPods waits until n pods of Deployment name run and each holds a
// committed record on the cluster network (eth0, the pod's IP) and on
// hlk8s-nad (net1), both naming the pod; it returns them.
func waitMultusPods(t testing.TB, c *Cluster, name string, n int) []multusPod {
	t.Helper()
	var out []multusPod
	waitUntil(t, 3*time.Minute, itoa(n)+" pods of "+name+" with both records committed", func() (bool, string) {
		out = out[:0]
		var pods []podInfo
		for _, p := range runningPods(t, c, multusNamespace) {
			if strings.HasPrefix(p.Name, name+"-") {
				pods = append(pods, p)
			}
		}
		if len(pods) != n {
			return false, itoa(len(pods)) + " running"
		}
		rs := records(t)
		for _, p := range pods {
			mp := multusPod{podInfo: p}
			for _, r := range rs {
				if r.PodUID != p.UID {
					continue
				}
				switch {
				case r.Network == PodNetwork && r.IfName == "eth0":
					mp.eth0 = r
				case r.Network == nadName && r.IfName == "net1":
					mp.net1 = r
				default:
					return false, "pod " + p.Name + " holds " + r.IP.String() + " on " + r.Network + " " + r.IfName
				}
			}
			for _, r := range []allocator.Record{mp.eth0, mp.net1} {
				if !r.IP.IsValid() || r.State != allocator.StateCommitted {
					return false, "pod " + p.Name + ": records " + mp.eth0.IP.String() + " " + string(mp.eth0.State) +
						", " + mp.net1.IP.String() + " " + string(mp.net1.State)
				}
			}
			out = append(out, mp)
		}
		return true, ""
	})
	return out
}

// call is one line of a failplugin's log.
type call struct {
	Verb, ContainerID, Ifname, Netns, Args, RuntimeConfig, Error string
}

func readCalls(t testing.TB, path string) []call {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var cl call
		if json.Unmarshal(sc.Bytes(), &cl) == nil {
			out = append(out, cl)
		}
	}
	return out
}

// cniArgs splits CNI_ARGS into its pairs, in order (a key may repeat).
func cniArgs(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, [2]string{k, v})
	}
	return out
}

// checkDelegation checks what the delegates of the running pods were
// given, as the failplugin in each chain logged it, against what the
// plugin's records hold: the sandbox ID as CNI_CONTAINERID, eth0 and net1,
// the sandbox's netns under the runtime's netns dir, and K8S_POD_UID,
// K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS with the pod's values
// (every value a key has, when Multus repeats it). net1 carries the address
// of its record, as Multus reports it in network-status.
func checkDelegation(t *testing.T, pods []multusPod) {
	t.Helper()
	for _, p := range pods {
		if p.eth0.ContainerID != p.net1.ContainerID {
			t.Errorf("pod %s: eth0 record of sandbox %s, net1 of %s", p.Name, p.eth0.ContainerID, p.net1.ContainerID)
		}
		if p.eth0.IP.String() != p.IP {
			t.Errorf("pod %s: IP %s, eth0 record %s", p.Name, p.IP, p.eth0.IP)
		}
		for _, r := range []allocator.Record{p.eth0, p.net1} {
			if r.PodNamespace != multusNamespace || r.PodName != p.Name {
				t.Errorf("record %s (%s) names pod %s/%s, want %s/%s", r.IP, r.IfName, r.PodNamespace, r.PodName, multusNamespace, p.Name)
			}
			if !strings.HasPrefix(r.Netns, NetnsDir+"/") {
				t.Errorf("record %s (%s) netns %q is not under the runtime's netns dir %s", r.IP, r.IfName, r.Netns, NetnsDir)
			}
		}
		for _, l := range []struct {
			path, ifname string
		}{{multusClusterLog, "eth0"}, {nadCallsLog, "net1"}} {
			var add *call
			for _, cl := range readCalls(t, l.path) {
				if cl.Verb == "ADD" && cl.ContainerID == p.eth0.ContainerID && cl.Error == "" {
					add = &cl
				}
			}
			if add == nil {
				t.Errorf("pod %s: no successful ADD of sandbox %s in %s", p.Name, p.eth0.ContainerID, l.path)
				continue
			}
			t.Logf("Multus v4.3.0 gave the %s delegate of pod %s: CNI_IFNAME=%s CNI_NETNS=%s CNI_ARGS=%s runtimeConfig=%s",
				l.ifname, p.Name, add.Ifname, add.Netns, add.Args, add.RuntimeConfig)
			if add.Ifname != l.ifname || add.Netns != p.eth0.Netns {
				t.Errorf("pod %s: the %s delegate got ifname %s, netns %s (record: %s)", p.Name, l.ifname, add.Ifname, add.Netns, p.eth0.Netns)
			}
			want := map[string]string{"K8S_POD_UID": p.UID, "K8S_POD_NAMESPACE": multusNamespace, "K8S_POD_NAME": p.Name,
				"K8S_POD_INFRA_CONTAINER_ID": p.eth0.ContainerID}
			seen := map[string]int{}
			for _, kv := range cniArgs(add.Args) {
				if w, ok := want[kv[0]]; ok {
					seen[kv[0]]++
					if kv[1] != w {
						t.Errorf("pod %s, %s delegate: CNI_ARGS %s=%s, want %s", p.Name, l.ifname, kv[0], kv[1], w)
					}
				}
			}
			for k := range want {
				if seen[k] == 0 {
					t.Errorf("pod %s, %s delegate: no %s in CNI_ARGS %s", p.Name, l.ifname, k, add.Args)
				}
			}
		}
	}
}

// checkNet1 checks that pod p's net1 carries its record's address, in the
// pod's netns and in the network-status annotation Multus writes.
func checkNet1(t *testing.T, c *Cluster, p multusPod) {
	t.Helper()
	out := kubectl(t, c, "-n", multusNamespace, "get", "pod", p.Name, "-o",
		`jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}`)
	var statuses []struct {
		Name, Interface string
		IPs             []string `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &statuses); err != nil {
		t.Errorf("pod %s: network-status %q: %v", p.Name, out, err)
	}
	found := false
	for _, st := range statuses {
		if st.Interface == "net1" {
			found = true
			if st.Name != multusNamespace+"/"+nadName || len(st.IPs) != 1 || st.IPs[0] != p.net1.IP.String() {
				t.Errorf("pod %s: network-status says net1 is %s %v, its record %s on %s", p.Name, st.Name, st.IPs, p.net1.IP, nadName)
			}
		}
	}
	if !found {
		t.Errorf("pod %s: no net1 in network-status %s", p.Name, out)
	}
	argv := c.inNS("nsenter", "--net="+p.eth0.Netns, "ip", "-o", "-4", "addr", "show", "dev", "net1")
	b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil || !strings.Contains(string(b), " "+p.net1.IP.String()+"/") {
		t.Errorf("pod %s: net1 in its netns does not carry %s (%v): %s", p.Name, p.net1.IP, err, b)
	}
}

// secondaryLoop runs the #12130 loop on hlk8s-nad-loop (no DaemonSet) and
// returns its pods' UIDs once their Deployment is deleted.
func secondaryLoop(t *testing.T, c *Cluster) []string {
	for _, f := range []string{nadLoopFailAdd, nadLoopFailDel} {
		if err := os.WriteFile(f, []byte("e2e: NAD chain broken on purpose\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(nadLoopFailAdd); os.Remove(nadLoopFailDel) })
	apply(t, c, multusDeployment(multusNamespace, "loop", 2, nadLoopName))
	const window = 80 * time.Second
	perPod := map[string]int{} // pod UID -> most records on the NAD at one sample
	t0 := time.Now()
	samples := 0
	for time.Since(t0) < window {
		held := map[string]int{}
		for _, r := range records(t) {
			if r.Network == nadLoopName {
				held[r.PodUID]++
			}
		}
		for u, n := range held {
			perPod[u] = max(perPod[u], n)
		}
		samples++
		time.Sleep(2 * time.Second)
	}
	// Attempts per pod: the failplugin's failed ADDs (one per sandbox).
	attempts := map[string]map[string]bool{}
	for _, cl := range readCalls(t, nadLoopCallsLog) {
		if cl.Verb != "ADD" || cl.Error == "" {
			continue
		}
		for _, kv := range cniArgs(cl.Args) {
			if kv[0] == "K8S_POD_UID" {
				if attempts[kv[1]] == nil {
					attempts[kv[1]] = map[string]bool{}
				}
				attempts[kv[1]][cl.ContainerID] = true
			}
		}
	}
	most, uids := 0, []string{}
	for u, sbs := range attempts {
		uids = append(uids, u)
		most = max(most, len(sbs))
		t.Logf("pod %s: %d sandboxes failed on %s, at most %d of its addresses held at once (%d samples)", u, len(sbs), nadLoopName, perPod[u], samples)
	}
	if len(attempts) != 2 || most < 2 {
		t.Fatalf("the loop made %d pods retry, at most %d sandboxes each: kubelet did not retry (the loop proved nothing)", len(attempts), most)
	}
	for u, n := range perPod {
		if n > 1 {
			t.Errorf("pod %s held %d addresses of %s at once, want at most 1", u, n, nadLoopName)
		}
	}
	kubectl(t, c, "-n", multusNamespace, "delete", "deployment", "loop", "--wait=false")
	waitUntil(t, 2*time.Minute, "the loop's pods gone", func() (bool, string) {
		names, err := c.podNames(multusNamespace, "app=loop")
		return err == nil && len(names) == 0, fmt.Sprint(names, err)
	})
	return uids
}

// cacheAtDel deletes pods whose Multus cache entry is missing or corrupt,
// and one whose ADD never completed, and returns their UIDs.
func cacheAtDel(t *testing.T, c *Cluster, containerdLog string, containerdOff int64) []string {
	multusOff := logSize(multusLog)
	apply(t, c, multusDeployment(multusNamespace, "cache-gone", 1, nadName))
	apply(t, c, multusDeployment(multusNamespace, "cache-bad", 1, nadName))
	gone := waitMultusPods(t, c, "cache-gone", 1)[0]
	bad := waitMultusPods(t, c, "cache-bad", 1)[0]
	entry := func(p multusPod) string { return filepath.Join(multusCacheDir, p.eth0.ContainerID) }
	if err := os.Remove(entry(gone)); err != nil {
		t.Fatalf("the Multus cache entry of pod %s: %v", gone.Name, err)
	}
	if err := os.WriteFile(entry(bad), []byte("{\"not\": [a cache entry"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(entry(bad)) })

	// A pod whose ADD never completes: held in the NAD's chain, after its
	// bridge took an address on both networks.
	if err := os.WriteFile(nadHoldAdd, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(nadHoldAdd); os.Remove(nadFailAdd) })
	apply(t, c, multusDeployment(multusNamespace, "never", 1, nadName))
	var held allocator.Record
	waitUntil(t, 2*time.Minute, "the held pod's address on "+nadName, func() (bool, string) {
		for _, r := range records(t) {
			if r.Network == nadName && strings.HasPrefix(r.PodName, "never-") {
				held = r
				return true, ""
			}
		}
		return false, ""
	})
	if held.State != allocator.StatePending {
		t.Errorf("the held ADD's record on %s is %s, want pending", nadName, held.State)
	}
	neverUID := held.PodUID
	os.Remove(filepath.Join(multusCacheDir, held.ContainerID))
	kubectl(t, c, "-n", multusNamespace, "delete", "deployment", "never", "cache-gone", "cache-bad", "--wait=false")
	// The held pod is being deleted before its ADD fails: kubelet makes no
	// other sandbox for it.
	waitUntil(t, time.Minute, "the held pod terminating", func() (bool, string) {
		p, _, err := c.pod(multusNamespace, held.PodName)
		return err == nil && p != nil && p.DeletionTimestamp != nil, fmt.Sprint(err)
	})
	if err := os.WriteFile(nadFailAdd, []byte("e2e: the ADD never completes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(nadHoldAdd)

	sandboxes := map[string]string{gone.eth0.ContainerID: gone.Name, bad.eth0.ContainerID: bad.Name, held.ContainerID: held.PodName}
	waitUntil(t, 3*time.Minute, "the pods and their sandboxes gone", func() (bool, string) {
		names, err := c.podNames(multusNamespace, "")
		if err != nil {
			return false, err.Error()
		}
		for _, name := range names {
			for _, n := range []string{"never-", "cache-gone-", "cache-bad-"} {
				if strings.HasPrefix(name, n) {
					return false, strings.Join(names, " ")
				}
			}
		}
		sbs, err := c.Sandboxes()
		if err != nil {
			return false, err.Error()
		}
		for _, sb := range sbs {
			if name, ok := sandboxes[sb.Id]; ok && sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return false, "sandbox of " + name + " " + sb.State.String()
			}
		}
		return true, ""
	})
	// Stopped sandboxes are removed by kubelet's garbage collection; removing
	// one here runs its teardown again, which must succeed as well.
	for id, name := range sandboxes {
		if sandboxListed(c, id) {
			if err := c.stopRemoveSandbox(id); err != nil {
				t.Errorf("remove the sandbox of %s: %v", name, err)
			}
		}
	}
	for _, l := range newLines(t, containerdLog, containerdOff) {
		for id, name := range sandboxes {
			if strings.Contains(l, id) && strings.Contains(strings.ToLower(l), "failed to destroy network") {
				t.Errorf("containerd failed a DEL of %s's sandbox: %s", name, l)
			}
		}
	}
	os.Remove(nadFailAdd)
	// Multus's log: no delegate DEL failed but the loop's (SecondaryLoop
	// runs beside this, its NAD's DELs fail on purpose).
	for _, l := range newLines(t, multusLog, multusOff) {
		if strings.Contains(l, "DelegateDel: error") && !strings.Contains(l, `"`+nadLoopName+`"`) {
			t.Errorf("a Multus delegate DEL failed: %s", l)
		}
	}
	if _, err := os.Stat(entry(bad)); err == nil {
		t.Logf("Multus left the corrupt cache entry of %s's sandbox in place after its DEL", bad.Name)
	}
	for id, name := range sandboxes {
		for _, cl := range readCalls(t, nadCallsLog) {
			if cl.ContainerID == id && cl.Verb == "DEL" && cl.Error != "" {
				t.Errorf("the NAD chain's DEL of %s failed: %s", name, cl.Error)
			}
		}
	}
	return []string{gone.UID, bad.UID, neverUID}
}

// newLines is what path gained after offset off.
func newLines(t testing.TB, path string, off int64) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(off, 0); err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
