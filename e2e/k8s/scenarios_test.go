package k8s

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

const gcServiceAccount = "system:serviceaccount:hostlease-system:hostlease-gc"

// gcAPIGrants is what hostlease-gc asks the API server for (pkg/gc/kube.go):
// a node-filtered pod informer (list + watch) and Events (create). RBAC must
// grant exactly this.
var gcAPIGrants = map[string][]string{
	"pods":   {"list", "watch"},
	"events": {"create"},
}

// Scenario 1: kubectl apply -k installs the DaemonSet; install-cni puts the
// plugin in place (and the node, whose conflist names it, goes Ready);
// /metrics is served through the pod; RBAC grants what the daemon uses and
// no more; its log has no authorization errors.
func TestInstall(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)

	want, err := os.ReadFile(mustProjectBin(t, "hostlease"))
	if err != nil {
		t.Fatal(err)
	}
	installed := filepath.Join(CNIBinDir, "hostlease")
	got, err := os.ReadFile(installed)
	if err != nil {
		t.Fatalf("install-cni did not install the plugin: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from bin/hostlease (%d vs %d bytes)", installed, len(got), len(want))
	}
	if m := fileMode(t, installed); m&0o111 != 0o111 {
		t.Errorf("%s mode %v, want executable", installed, m)
	}
	if left, _ := filepath.Glob(filepath.Join(CNIBinDir, ".hostlease.tmp.*")); len(left) > 0 {
		t.Errorf("install-cni left temp files: %v", left)
	}
	waitNodeReady(t, c)

	pod := gcPod(t, c)
	waitUntil(t, time.Minute, "/metrics through the pod", func() (bool, string) {
		out, err := c.Kubectl("get", "--raw", "/api/v1/namespaces/"+SysNamespace+"/pods/"+pod+":19734/proxy/metrics")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, "hostlease_build_info") && strings.Contains(out, "hostlease_sweeps_total"), firstLines(out, 5)
	})

	// RBAC: every grant of the ServiceAccount beyond what any authenticated
	// identity gets, compared with what the code uses.
	granted := canIList(t, c, gcServiceAccount)
	baseline := canIList(t, c, "system:serviceaccount:default:default")
	extra := map[string][]string{}
	for res, verbs := range granted {
		if reflect.DeepEqual(baseline[res], verbs) {
			continue
		}
		extra[res] = verbs
	}
	if !reflect.DeepEqual(extra, gcAPIGrants) {
		t.Errorf("kubectl auth can-i --list for %s grants %v beyond the default, want exactly %v", gcServiceAccount, extra, gcAPIGrants)
	}

	log := gcLog(t, c)
	for _, bad := range []string{"Forbidden", "forbidden", "Unauthorized", "unauthorized"} {
		if strings.Contains(log, bad) {
			t.Errorf("daemon log mentions %q:\n%s", bad, grepLines(log, bad))
		}
	}
}

// Scenario 2: a Deployment's pods run; each address is a committed record
// naming its pod's namespace, name and UID.
func TestPods(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns = "e2e-pods"
	t.Cleanup(func() { deleteNamespace(t, c, ns) })
	apply(t, c, deployment(ns, "web", 3))
	pods := waitPodsRunning(t, c, ns, 3)
	waitUntil(t, time.Minute, "committed records for the 3 pods", func() (bool, string) {
		byIP := map[string]allocator.Record{}
		for _, r := range records(t) {
			byIP[r.IP.String()] = r
		}
		for _, p := range pods {
			r, ok := byIP[p.IP]
			if !ok {
				return false, "no record for " + p.Name + " " + p.IP
			}
			if r.State != allocator.StateCommitted || r.PodNamespace != ns || r.PodName != p.Name || r.PodUID != p.UID {
				return false, "record " + r.IP.String() + ": " + string(r.State) + " " + r.PodNamespace + "/" + r.PodName + " " + r.PodUID
			}
		}
		return true, ""
	})
}

// Scenario 3 (containerd #12130 through kubelet): a chain whose middle
// plugin fails ADD and DEL makes kubelet retry each pod's sandbox; every
// attempt leaks a pending address. The DaemonSet reclaims them with Events,
// `hostlease-gc leaks` explains each, and healing the chain lets the pods run.
func TestLeaksThroughKubelet(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns = "e2e-leaks"
	for _, f := range []string{FailAddFile, FailDelFile} {
		if err := os.WriteFile(f, []byte("e2e: chain broken on purpose\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}
	if err := c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, true, nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(FailAddFile)
		os.Remove(FailDelFile)
		deleteNamespace(t, c, ns)
		if err := c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil)); err != nil {
			t.Error(err)
		}
	})
	apply(t, c, deployment(ns, "crashloop", 2))

	// Two minutes of kubelet retrying both pods. Sample the pending records.
	start := time.Now()
	peak, leaked := 0, map[string]bool{}
	for time.Since(start) < 2*time.Minute {
		pending := 0
		for _, r := range records(t) {
			if r.PodNamespace == ns && r.State == allocator.StatePending {
				pending++
				leaked[r.ContainerID] = true
			}
		}
		peak = max(peak, pending)
		time.Sleep(2 * time.Second)
	}
	t.Logf("#12130 through kubelet: %d sandboxes leaked an address in 2 min, at most %d pending at once", len(leaked), peak)
	if len(leaked) < 2 {
		t.Fatalf("kubelet's retries leaked %d addresses in 2 minutes; the failing chain did not reproduce #12130", len(leaked))
	}
	if peak > maxPendingLeaks {
		t.Errorf("%d leaked addresses were pending at once with 2 pods crash-looping; want at most %d", peak, maxPendingLeaks)
	}

	// `hostlease-gc leaks` (inside the daemon's pod, as an operator runs it)
	// explains every record of a sandbox CRI does not list.
	out := kubectl(t, c, "-n", SysNamespace, "exec", gcPod(t, c), "-c", "hostlease-gc", "--",
		"/hostlease-gc", "leaks", "-o", "json", "--netns-dir="+NetnsDir)
	var rows []struct{ IP, Pod, State, Verdict, Reason, Detail string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("hostlease-gc leaks -o json: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r.Verdict == "" || r.Reason == "" {
			t.Errorf("leaks row without an explanation: %+v", r)
		}
	}

	// Every leak is reclaimed, with an Event on the pod (or the node).
	waitUntil(t, 4*time.Minute, "every leaked address reclaimed", func() (bool, string) {
		for _, r := range records(t) {
			if r.PodNamespace == ns && r.State == allocator.StatePending && !sandboxListed(c, r.ContainerID) &&
				time.Since(r.Created) > 2*time.Minute {
				return false, "still held: " + r.IP.String() + " of " + r.PodName + " created " + r.Created.Format(time.RFC3339)
			}
		}
		return true, ""
	})
	evs := reclaimEvents(t, c)
	onPod := 0
	for _, e := range evs {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Namespace == ns {
			onPod++
		} else if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != NodeName {
			t.Errorf("AddressReclaimed Event on %+v, want a pod of %s or node %s", e.InvolvedObject, ns, NodeName)
		}
	}
	if len(evs) == 0 {
		t.Errorf("no AddressReclaimed Events after %d leaks", len(leaked))
	}
	t.Logf("AddressReclaimed Events: %d (%d on pods)", len(evs), onPod)

	// Heal the chain: the pods run.
	os.Remove(FailAddFile)
	os.Remove(FailDelFile)
	waitPodsRunning(t, c, ns, 2)
}

// maxPendingLeaks is the most leaked addresses that may be pending at once
// with two pods crash-looping (the shipped settings).
const maxPendingLeaks = 16

type podInfo struct{ Name, UID, IP string }

func waitPodsRunning(t *testing.T, c *Cluster, ns string, n int) []podInfo {
	t.Helper()
	var pods []podInfo
	waitUntil(t, 3*time.Minute, "pods of "+ns+" Running", func() (bool, string) {
		out, err := c.Kubectl("-n", ns, "get", "pods", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.phase} {.status.podIP} {.metadata.deletionTimestamp}{"\n"}{end}`)
		if err != nil {
			return false, err.Error()
		}
		pods = pods[:0]
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 4 && f[2] == "Running" {
				pods = append(pods, podInfo{f[0], f[1], f[3]})
			}
		}
		return len(pods) == n, out
	})
	return pods
}

func sandboxListed(c *Cluster, id string) bool {
	sbs, err := c.Sandboxes()
	if err != nil {
		return true
	}
	for _, sb := range sbs {
		if sb.Id == id {
			return true
		}
	}
	return false
}

type event struct {
	InvolvedObject struct{ Kind, Namespace, Name string } `json:"involvedObject"`
	Reason         string                                 `json:"reason"`
	Message        string                                 `json:"message"`
}

func reclaimEvents(t *testing.T, c *Cluster) []event {
	t.Helper()
	out := kubectl(t, c, "get", "events", "-A", "--field-selector=reason=AddressReclaimed", "-o", "json")
	var l struct{ Items []event }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// canIList parses `kubectl auth can-i --list --as=user` into resource -> verbs.
func canIList(t *testing.T, c *Cluster, user string) map[string][]string {
	t.Helper()
	out := kubectl(t, c, "auth", "can-i", "--list", "--as="+user)
	res := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Resources") || strings.TrimSpace(line) == "" {
			continue
		}
		// "<resource>   [<non-resource URLs>]   [<names>]   [<verbs>]"
		i := strings.LastIndex(line, "[")
		j := strings.LastIndex(line, "]")
		name := strings.Fields(line)[0]
		if i < 0 || j < i || strings.HasPrefix(name, "[") {
			continue
		}
		verbs := strings.Fields(line[i+1 : j])
		sort.Strings(verbs)
		res[name] = append(res[name], verbs...)
		sort.Strings(res[name])
	}
	return res
}

func gcLog(t *testing.T, c *Cluster) string {
	t.Helper()
	out, err := c.Kubectl("-n", SysNamespace, "logs", "ds/"+DaemonSetName, "-c", "hostlease-gc", "--tail=-1")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustProjectBin(t *testing.T, name string) string {
	t.Helper()
	p, err := harness.ProjectBin(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
