package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

const gcServiceAccount = "system:serviceaccount:hostlease-system:hostlease-gc"

// gcAPIGrants is what hostlease-gc asks the API server for (pkg/daemon/kube.go):
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
	// install-cni is hostlease-gc's own command (the image has no shell): it
	// reports the installed file's hash and the CNI versions it answered.
	sum, err := fileSHA256(installed)
	if err != nil {
		t.Fatal(err)
	}
	if log := kubectl(t, c, "-n", SysNamespace, "logs", pod, "-c", "install-cni"); !strings.Contains(log,
		"install-cni: installed /hostlease as /host/opt/cni/bin/hostlease (sha256 "+sum+", CNI versions ") {
		t.Errorf("install-cni log does not report the installed plugin (sha256 %s):\n%s", sum, log)
	}
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

// Scenario 6b (upgrade and restart), with the quiet minute measured while
// pods churn: a Deployment is scaled up and down all along, so kubelet runs
// ADDs and DELs through the plugin the whole time.
//   - QuietMinute: a node whose pods start and stop but leak nothing is quiet
//     for the API server: the audit log records at most one request of the
//     daemon a minute, watches included (its pod watch stays open until the
//     server ends it).
//   - RollingUpdate: the DaemonSet is updated to an image with other binaries
//     and rolled back (kubectl rollout undo). install-cni replaces the plugin
//     atomically: a watcher that reads and execs the installed file all along
//     only ever finds a complete, executable copy of the old or the new
//     binary, an inode never changes content, the old binary stays intact
//     behind an open descriptor; containerd never fails to exec a plugin, no
//     ADD or DEL fails (no FailedKillPod, no FailedCreatePodSandBox), every
//     Running pod holds its committed record, the records are exactly the
//     Running pods', and the audit log shows only the DELs' releases.
//   - DaemonDeletedMidSweep: leaks on four networks of their own (the first
//     large, so its Events keep the sweep busy) lose their proof of death at
//     once; the daemon is frozen (SIGSTOP) at its first reclaim line, while
//     later networks are still unreclaimed, and its pod is deleted (SIGTERM
//     stays pending, kubelet kills it after the grace period): the new
//     pod's first sweep reclaims the rest; every leak is reclaimed exactly
//     once, nothing else is, and the store reads back consistent.
func TestUpgradeAndRestart(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns = "e2e-churn"
	apply(t, c, deployment(ns, "churn", 3))
	waitPodsRunning(t, c, ns, 3)
	t.Cleanup(func() { deleteNamespace(t, c, ns) })
	start := time.Now()
	containerdLog, kubeletLog := filepath.Join(LogDir, "containerd.log"), filepath.Join(LogDir, "kubelet.log")
	containerdOff, kubeletOff := logSize(containerdLog), logSize(kubeletLog)

	// The second image is built while the quiet minute is measured.
	type built struct {
		plugin string
		err    error
	}
	imageDone := make(chan built, 1)
	go func() { p, err := upgradeImage(c); imageDone <- built{p, err} }()

	ch := startChurn(c, ns, "churn", [2]int{6, 2})
	defer ch.Stop()

	t.Run("QuietMinute", func(t *testing.T) {
		// The daemon first reads the API server when a reclaim it reports
		// is due, and keeps its pod watch from then on: start it as a
		// reclaim does (a leak whose netns is gone, reclaimed with an
		// Event), then count a minute of what it asks.
		quiet := makeGhostLeaks(t, "hlk8s-quiet", "10.251.9.0/24", 1)
		t.Cleanup(func() { os.Remove(filepath.Join(CNIDataDir, "hlk8s-quiet.db")) })
		if err := os.Remove(quiet[0].Netns); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 3*time.Minute, "the daemon's pod watch (started by the leak's reclaim)", func() (bool, string) {
			reqs := gcRequests(t)
			for _, e := range reqs {
				if e.Verb == "watch" {
					return true, ""
				}
			}
			return false, strconv.Itoa(len(reqs)) + " requests of the daemon, no watch"
		})
		from := time.Now()
		time.Sleep(61 * time.Second) // the window measured, not a synchronisation
		// The window must see pods churn. On a loaded machine two scale
		// cycles can take longer than a minute (the machine, not hostlease):
		// the window then grows until they are done, and each minute it
		// spans allows one request.
		window := time.Minute
		if cycles, _ := ch.counts(); cycles < 2 {
			waitUntil(t, 4*time.Minute, "two churn cycles", func() (bool, string) {
				cycles, _ := ch.counts()
				return cycles >= 2, strconv.Itoa(cycles) + " cycles"
			})
			window = time.Since(from).Truncate(time.Second)
		}
		minutes := int((window + time.Minute - 1) / time.Minute)
		// Every request the audit log holds that the daemon made in the
		// window, whatever its verb (a watch is one when it starts).
		n, watches := 0, 0
		for _, e := range gcRequests(t) {
			if !e.RequestReceivedTimestamp.Before(from) && e.RequestReceivedTimestamp.Before(from.Add(window)) {
				n++
				if e.Verb == "watch" {
					watches++
				}
				t.Logf("request in the quiet window: %s %s (%s)", e.Verb, e.RequestURI, e.RequestReceivedTimestamp.Format(time.RFC3339Nano))
			}
		}
		cycles, pods := ch.counts()
		t.Logf("hostlease-gc made %d API requests (%d of them watches) in a quiet %v while pods churned (%d scale cycles, %d pods so far; %d requests since it started)",
			n, watches, window, cycles, pods, len(gcRequests(t)))
		if n > minutes {
			t.Errorf("%d API requests (%d watches) in a quiet %v, want at most %d (one a minute)", n, watches, window, minutes)
		}
	})

	t.Run("RollingUpdate", func(t *testing.T) {
		b := <-imageDone
		if b.err != nil {
			t.Fatal(b.err)
		}
		r := watchRollout(t, c, ns, b.plugin, start, containerdOff, kubeletOff)
		defer r.w.Stop()
		r.swap(t, "new", UpgradeVersion, func() {
			kubectl(t, c, "-n", SysNamespace, "set", "image", "daemonset/"+DaemonSetName,
				"install-cni="+UpgradeImage, "hostlease-gc="+UpgradeImage)
		})
		r.swap(t, "old", r.oldVersion, func() {
			kubectl(t, c, "-n", SysNamespace, "rollout", "undo", "daemonset/"+DaemonSetName)
		})
		r.check(t, ch)
	})

	t.Run("DaemonDeletedMidSweep", func(t *testing.T) {
		start := time.Now() // reclaims before it (QuietMinute's) are not this scenario's
		ch.Stop()
		settleChurn(t, c, ns, 3)
		nets := []struct {
			name, subnet string
			n            int
		}{{"hlk8s-sweep-a", "10.251.3.0/24", 60}, {"hlk8s-sweep-b", "10.251.4.0/24", 4},
			{"hlk8s-sweep-c", "10.251.5.0/24", 4}, {"hlk8s-sweep-d", "10.251.6.0/24", 4}}
		t.Cleanup(func() {
			for _, n := range nets {
				os.Remove(filepath.Join(CNIDataDir, n.name+".db"))
			}
		})
		var ghosts []ghostLeak
		for _, n := range nets {
			ghosts = append(ghosts, makeGhostLeaks(t, n.name, n.subnet, n.n)...)
		}
		t.Cleanup(func() {
			for _, g := range ghosts {
				os.Remove(g.Netns)
			}
		})
		isGhost := map[string]ghostLeak{}
		for _, g := range ghosts {
			isGhost[g.ContainerID] = g
		}
		// The churn's pods are the live ones.
		live := map[string]allocator.Record{}
		for _, r := range records(t) {
			if r.PodNamespace == ns {
				live[r.ContainerID] = r
			}
		}
		if len(live) == 0 {
			t.Fatal("no live pod records to watch")
		}
		oldPod := gcPod(t, c)
		pid, err := c.ContainerPID(SysNamespace, oldPod, "hostlease-gc")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		lines, err := followLog(ctx, c, SysNamespace, oldPod, "hostlease-gc")
		if err != nil {
			t.Fatal(err)
		}
		frozen, deleted := false, false
		t.Cleanup(func() {
			if frozen && !deleted { // stopped before its pod was deleted: let it go on
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
		// Their netns go at once (a burst of teardowns): proof of death
		// for every ghost, one sweep.
		for _, g := range ghosts {
			if err := os.Remove(g.Netns); err != nil {
				t.Fatal(err)
			}
		}
		timeout := time.After(2 * time.Minute)
		for !frozen {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the daemon's log ended before it reclaimed a leak")
				}
				if strings.Contains(l, `msg="reclaimed address"`) && logfmtValue(l, "network") == nets[0].name {
					if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
					frozen = true
				}
			case <-timeout:
				t.Fatal("timed out after 2m waiting for the daemon to reclaim a leak of " + nets[0].name)
			}
		}
		cancel()
		held := map[string]bool{}
		for _, r := range records(t) {
			if _, ok := isGhost[r.ContainerID]; ok {
				held[r.ContainerID] = true
			}
		}
		t.Logf("daemon pod %s frozen mid-sweep with %d of the %d leaks still held", oldPod, len(held), len(ghosts))
		if len(held) == 0 {
			t.Fatal("the sweep had reclaimed every leak before it was stopped: not mid-sweep (are Events no longer rate-limited?)")
		}
		kubectl(t, c, "-n", SysNamespace, "delete", "pod", oldPod, "--grace-period=1", "--wait=false")
		deleted = true
		var newPod string
		waitUntil(t, 2*time.Minute, "the DaemonSet's new pod Running", func() (bool, string) {
			pods, err := c.pods(SysNamespace, "app.kubernetes.io/name=hostlease-gc")
			var f []string
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning {
					f = append(f, p.Name)
				}
			}
			if err != nil || len(f) != 1 || f[0] == oldPod {
				return false, strings.Join(f, " ")
			}
			newPod = f[0]
			return true, ""
		})
		waitUntil(t, 2*time.Minute, "every leak reclaimed", func() (bool, string) {
			n := 0
			for _, r := range records(t) {
				if _, ok := isGhost[r.ContainerID]; ok {
					n++
				}
			}
			return n == 0, itoa(n) + " still held"
		})
		// The new pod finished the job: it reclaimed exactly what the frozen
		// daemon left. A sweep reports a network after committing its
		// reclaims, one log line and one Event per address, and Events are
		// rate-limited (client-go's 5 QPS): the store can be empty while the
		// last lines of the report are still to come. So wait for the log to
		// name every leak the frozen daemon left (or time out with the log
		// kept) before judging it.
		var log string
		var byNew map[string]bool
		var sweeps, inFirst int
		waitUntil(t, 2*time.Minute, "the new pod's log to report every leak the frozen daemon left", func() (bool, string) {
			out, err := c.Kubectl("-n", SysNamespace, "logs", newPod, "-c", "hostlease-gc")
			if err != nil {
				return false, err.Error()
			}
			log, byNew, sweeps, inFirst = out, map[string]bool{}, 0, 0
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, `msg="sweep finished"`) {
					sweeps++
				}
				if strings.Contains(l, `msg="reclaimed address"`) {
					byNew[logfmtValue(l, "sandbox")] = true
					if sweeps == 0 {
						inFirst++
					}
				}
			}
			for id := range held {
				if !byNew[id] {
					return false, "no reclaim logged for " + isGhost[id].IP + "\n" + log
				}
			}
			return true, ""
		})
		t.Logf("the new pod reclaimed %d leaks, %d of them in its first sweep", len(byNew), inFirst)
		for id := range byNew {
			if !held[id] {
				t.Errorf("the new pod reclaimed sandbox %s, which was not left to it", id)
			}
		}
		// Every leak reclaimed exactly once, nothing else.
		seen := map[string]int{}
		for _, ev := range auditLog(t) {
			if ev.Time.Before(start) {
				continue
			}
			if ev.Action == "reclaim" {
				if _, ok := isGhost[ev.ContainerID]; !ok {
					t.Errorf("audit: reclaimed %s of sandbox %s (%s), which is not a leak", ev.IP, ev.ContainerID, ev.Pod)
				}
				seen[ev.ContainerID+" "+ev.IP.String()]++
			}
		}
		for _, g := range ghosts {
			if n := seen[g.ContainerID+" "+g.IP]; n != 1 {
				t.Errorf("leak %s of %s reclaimed %d times, want once", g.IP, g.Network, n)
			}
		}
		after := map[string]allocator.Record{}
		for _, r := range records(t) {
			after[r.ContainerID] = r
		}
		for id, r := range live {
			if now, ok := after[id]; !ok || now.IP != r.IP || now.State != allocator.StateCommitted {
				t.Errorf("live pod %s lost its record %s", r.PodName, r.IP)
			}
		}
		// The store reads back consistent: hostlease-gc status finds no
		// damage and nothing held on the leak networks.
		out, err := runGC("status", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", CNIDataDir)
		if err != nil {
			t.Fatal(err)
		}
		var rows []struct {
			Network       string
			Used, Damaged int
			Error         string
		}
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		for _, r := range rows {
			if r.Damaged > 0 || r.Error != "" {
				t.Errorf("store of %s: %d damaged, error %q", r.Network, r.Damaged, r.Error)
			}
			if strings.HasPrefix(r.Network, "hlk8s-sweep-") && r.Used != 0 {
				t.Errorf("store of %s still holds %d addresses", r.Network, r.Used)
			}
		}
		if strings.Contains(log, "derived indexes disagreed") {
			t.Errorf("the new pod found the stores' indexes inconsistent:\n%s", grepLines(log, "derived indexes"))
		}
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
	startCrashLoop(t, c, ns, "crashloop", 2, nil)

	// Two minutes of kubelet retrying both pods. Sample the pending records
	// for the peak; count the leaks from the records and from the store's
	// audit log (a leak with proof of death is reclaimed within about a
	// second, usually between two samples).
	start := time.Now()
	peak, leaked := 0, map[string]bool{}
	for time.Since(start) < 2*time.Minute {
		pending := 0
		for _, r := range records(t) {
			if r.PodNamespace == ns && strings.HasPrefix(r.PodName, "crashloop-") && r.State == allocator.StatePending {
				pending++
				leaked[r.ContainerID] = true
			}
		}
		peak = max(peak, pending)
		time.Sleep(2 * time.Second)
	}
	for _, ev := range auditLog(t) {
		if ev.Action == "reclaim" && strings.HasPrefix(ev.Pod, ns+"/crashloop-") && !ev.Time.Before(start) {
			leaked[ev.ContainerID] = true
		}
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
	if onPod == 0 {
		t.Errorf("no AddressReclaimed Event on a pod of %s (%d Events) although the pods exist", ns, len(evs))
	}
	t.Logf("AddressReclaimed Events: %d (%d on pods)", len(evs), onPod)

	// Heal the chain: the pods run.
	healChain()
	waitPodsRunning(t, c, ns, 3)
}

// pluginFailures are the lines of a runtime's log that show a CNI plugin
// failing to execute (being written, not an executable, not permitted) or a
// DEL failing.
func pluginFailures(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "text file busy") || strings.Contains(l, "exec format error") ||
			strings.Contains(l, "failed to destroy network") ||
			(strings.Contains(l, "permission denied") && strings.Contains(l, strings.ToLower(CNIBinDir))) {
			out = append(out, line)
		}
	}
	return out
}

// settleChurn scales the churn Deployment to n and waits until exactly n
// pods run, none is terminating, and the namespace's records are exactly
// theirs (committed, each pod's own address): every DEL of a deleted pod ran.
func settleChurn(t testing.TB, c *Cluster, ns string, n int) {
	t.Helper()
	kubectl(t, c, "-n", ns, "scale", "deployment", "churn", "--replicas="+itoa(n))
	var running []podInfo
	waitUntil(t, 3*time.Minute, itoa(n)+" churn pods and nothing terminating", func() (bool, string) {
		running = runningPods(t, c, ns)
		all, _ := c.podNames(ns, "")
		return len(running) == n && len(all) == n, itoa(len(running)) + " running of " + itoa(len(all))
	})
	waitUntil(t, time.Minute, "exactly the running pods' records", func() (bool, string) {
		byUID := map[string]allocator.Record{}
		held := 0
		for _, r := range records(t) {
			if r.PodNamespace == ns {
				held++
				byUID[r.PodUID] = r
			}
		}
		for _, p := range running {
			r, ok := byUID[p.UID]
			if !ok || r.IP.String() != p.IP || r.State != allocator.StateCommitted {
				return false, "pod " + p.Name + " " + p.IP + " has no committed record of its own"
			}
		}
		return held == len(running), itoa(held) + " records for " + itoa(len(running)) + " pods"
	})
}

// maxPendingLeaks is the most leaked addresses that may be pending at once
// with two pods crash-looping under the shipped settings: kubelet retries
// each pod about every 10 s and a leak with proof of death (its netns gone)
// is reclaimed by the next sweep (every 30 s), so about 2 x 3 leaks wait at
// any time, never a growing backlog (without proof: 13 and rising).
const maxPendingLeaks = 8

type podInfo struct{ Name, UID, IP string }

func waitPodsRunning(t testing.TB, c *Cluster, ns string, n int) []podInfo {
	t.Helper()
	var pods []podInfo
	waitUntil(t, 3*time.Minute, "pods of "+ns+" Running", func() (bool, string) {
		pods = runningPods(t, c, ns)
		return len(pods) == n, itoa(len(pods)) + " running"
	})
	return pods
}

// runningPods lists the Running, not terminating pods of ns with their IPs.
func runningPods(t testing.TB, c *Cluster, ns string) []podInfo {
	all, err := c.pods(ns, "")
	if err != nil {
		t.Logf("list pods: %v", err)
		return nil
	}
	var pods []podInfo
	for _, p := range all {
		if runningPod(&p) && p.Status.PodIP != "" {
			pods = append(pods, podInfo{p.Name, string(p.UID), p.Status.PodIP})
		}
	}
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

func reclaimEvents(t testing.TB, c *Cluster) []event {
	t.Helper()
	out := kubectl(t, c, "get", "events", "-A", "--field-selector=reason=AddressReclaimed", "-o", "json")
	var l struct{ Items []event }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// canIList parses `kubectl auth can-i --list --as=user` into resource -> verbs.
func canIList(t testing.TB, c *Cluster, user string) map[string][]string {
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

func gcLog(t testing.TB, c *Cluster) string {
	t.Helper()
	out, err := c.Kubectl("-n", SysNamespace, "logs", "ds/"+DaemonSetName, "-c", "hostlease-gc", "--tail=-1")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustProjectBin(t testing.TB, name string) string {
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

// Scenario 8 (API veto for real): a record whose sandbox CRI no longer lists
// is not reclaimed while a live pod on the node lists its address in the real
// API server; the veto lifts when the pod goes.
//
// Construction: one running pod; kubelet stopped (the API keeps showing the
// pod Running with its IP); its sandbox removed through CRI while the
// conflist names another dataDir, so the teardown DEL does not release the
// record (as after a conflist swap); the conflist restored; a file put back
// at the record's netns path (a netns the runtime failed to remove), so the
// record carries no proof of death and the reclaim rules without proof,
// which the veto belongs to, apply. The daemon runs with
// --min-age=30s --grace=20s --interval=10s for this test instead of 5m/2m/30s.
func TestAPIVeto(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns = "e2e-veto"
	t.Cleanup(func() {
		if !c.Running("kubelet") {
			if err := c.StartKubelet(); err != nil {
				t.Error(err)
			}
		}
		_ = c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil))
		deleteNamespace(t, c, ns)
		ensureInstalled(t, c) // the overlay's arguments again
	})
	kubectl(t, c, "-n", SysNamespace, "patch", "daemonset", DaemonSetName, "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--min-age=30s"},`+
			`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--grace=20s"},`+
			`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--interval=10s"}]`)
	kubectl(t, c, "-n", SysNamespace, "rollout", "status", "daemonset/"+DaemonSetName, "--timeout=3m")
	apply(t, c, deployment(ns, "vetoed", 1))
	pod := waitPodsRunning(t, c, ns, 1)[0]
	waitUntil(t, time.Minute, "the pod's record committed", func() (bool, string) {
		for _, r := range records(t) {
			if r.PodUID == pod.UID && r.State == allocator.StateCommitted {
				return true, ""
			}
		}
		return false, ""
	})

	c.StopKubelet()
	// With kubelet stopped, the pod's sandbox and the address the API lists
	// for it are fixed (kubelet may have replaced the first sandbox before
	// it stopped): the record under test is the one holding that address.
	var rec allocator.Record
	waitUntil(t, time.Minute, "the committed record of the address the pod lists", func() (bool, string) {
		p, _, err := c.pod(ns, pod.Name)
		if err != nil || p == nil {
			return false, fmt.Sprint("pod: ", err)
		}
		for _, r := range records(t) {
			if r.PodUID == pod.UID && r.State == allocator.StateCommitted && r.IP.String() == p.Status.PodIP {
				rec = r
				return true, ""
			}
		}
		return false, "pod lists " + p.Status.PodIP
	})
	other := filepath.Join(Root, "cni-data-other")
	if err := c.WriteConflist("10-hlk8s.conflist", podConflistDataDir(PodSubnet, other)); err != nil {
		t.Fatal(err)
	}
	if err := c.stopRemoveSandbox(rec.ContainerID); err != nil {
		t.Fatalf("remove sandbox %s: %v", rec.ContainerID, err)
	}
	if err := c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.Netns, NetnsDir+"/") {
		t.Fatalf("record's netns %q is not under the netns dir %s", rec.Netns, NetnsDir)
	}
	if err := os.WriteFile(rec.Netns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(rec.Netns) })
	waitUntil(t, 4*time.Minute, "the daemon vetoing the reclaim", func() (bool, string) {
		for _, r := range records(t) {
			if r.IP == rec.IP {
				return r.Obs.Verdict == "vetoed", "verdict " + r.Obs.Verdict + " misses " + itoa(r.Obs.Misses)
			}
		}
		t.Fatalf("record %s was reclaimed while pod %s/%s lists it", rec.IP, ns, pod.Name)
		return false, ""
	})
	if out, err := c.Kubectl("get", "--raw", "/api/v1/namespaces/"+SysNamespace+"/pods/"+gcPod(t, c)+":19734/proxy/metrics"); err != nil {
		t.Error(err)
	} else if !strings.Contains(out, `hostlease_vetoes_total{network="`+PodNetwork+`",reason="pod_lists_ip"}`) {
		t.Errorf("no hostlease_vetoes_total{reason=pod_lists_ip} in /metrics:\n%s", grepLines(out, "vetoes"))
	}

	// The pod goes (force: its kubelet is down): the veto lifts.
	kubectl(t, c, "-n", ns, "delete", "pod", pod.Name, "--grace-period=0", "--force")
	waitUntil(t, 2*time.Minute, "the address reclaimed once the pod is gone", func() (bool, string) {
		for _, r := range records(t) {
			if r.IP == rec.IP && r.ContainerID == rec.ContainerID {
				return false, "verdict " + r.Obs.Verdict
			}
		}
		return true, ""
	})
	found := false
	for _, e := range reclaimEvents(t, c) {
		found = found || strings.Contains(e.Message, rec.IP.String())
	}
	if !found {
		t.Errorf("no AddressReclaimed Event mentions %s", rec.IP)
	}
	if err := c.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, c)
}

// Scenario 6 (node reboot): kubelet and containerd stop, every sandbox and
// netns disappears, both start again. The addresses of the sandboxes that
// died are reclaimed (their netns is gone); the pods' new sandboxes keep
// theirs; no address is held twice.
func TestNodeReboot(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns = "e2e-reboot"
	t.Cleanup(func() { deleteNamespace(t, c, ns) })
	apply(t, c, deployment(ns, "survivor", 2))
	before := map[string]bool{}
	for _, p := range waitPodsRunning(t, c, ns, 2) {
		before[p.UID] = true
	}
	old := map[string]bool{} // sandbox IDs before the reboot
	waitUntil(t, time.Minute, "records of the 2 pods committed", func() (bool, string) {
		clear(old)
		for _, r := range records(t) {
			if r.PodNamespace == ns && r.State == allocator.StateCommitted {
				old[r.ContainerID] = true
			}
		}
		return len(old) == 2, itoa(len(old))
	})

	if err := c.Reboot(); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	waitNodeReady(t, c)
	ensureInstalled(t, c)
	var pods []podInfo
	waitUntil(t, 4*time.Minute, "the dead sandboxes' addresses reclaimed, the live ones kept", func() (bool, string) {
		// The API shows the old IPs until kubelet reports the new sandboxes.
		pods = runningPods(t, c, ns)
		rs := records(t)
		byIP := map[string]allocator.Record{}
		for _, r := range rs {
			if old[r.ContainerID] {
				return false, "record of dead sandbox " + r.ContainerID[:12] + " " + r.IP.String() + " verdict " + r.Obs.Verdict
			}
			byIP[r.IP.String()] = r
		}
		if len(pods) != 2 {
			return false, itoa(len(pods)) + " pods running"
		}
		for _, p := range pods {
			r, ok := byIP[p.IP]
			if !ok || r.PodUID != p.UID || r.State != allocator.StateCommitted {
				return false, "pod " + p.Name + " " + p.IP + " not held committed by its own record"
			}
		}
		return true, ""
	})
	for _, p := range pods {
		if !before[p.UID] {
			t.Errorf("pod %s is new (uid %s): the reboot should restart the same pods", p.Name, p.UID)
		}
	}
	if pods[0].IP == pods[1].IP {
		t.Errorf("both pods got %s after the reboot", pods[0].IP)
	}
}

// Scenario 7 (live migration): a node running host-local with pods switches
// its conflist to hostlease (same network, same dataDir). The running pods
// keep their addresses, new pods never get one of them, the old pods'
// teardown releases the imported records, and `hostlease-gc export` writes
// host-local's files back so host-local can take over again.
func TestLiveMigrationFromHostLocal(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns, netName, subnet = "e2e-migrate", "hlk8s-mig", "10.251.1.0/24"
	hostLocal := func() []byte {
		return mustJSON(map[string]any{"cniVersion": "1.1.0", "name": netName, "plugins": []map[string]any{{
			"type": "bridge", "bridge": "hlk8s-br1", "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": subnet}}}, "dataDir": CNIDataDir},
		}}})
	}
	hostlease := func() []byte {
		return mustJSON(map[string]any{"cniVersion": "1.1.0", "name": netName, "plugins": []map[string]any{{
			"type": "bridge", "bridge": "hlk8s-br1", "isGateway": true,
			"ipam": map[string]any{"type": "hostlease", "ranges": [][]map[string]string{{{"subnet": subnet}}}, "dataDir": CNIDataDir},
		}, {"type": "hostlease", "dataDir": CNIDataDir}}})
	}
	t.Cleanup(func() {
		deleteNamespace(t, c, ns)
		if err := c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil)); err != nil {
			t.Error(err)
		}
	})
	if err := c.WriteConflist("10-hlk8s.conflist", hostLocal()); err != nil {
		t.Fatal(err)
	}
	apply(t, c, deployment(ns, "legacy", 2))
	legacy := waitPodsRunning(t, c, ns, 2)
	legacyIP := map[string]string{}
	for _, p := range legacy {
		legacyIP[p.IP] = p.Name
		if _, err := os.Stat(filepath.Join(CNIDataDir, netName, p.IP)); err != nil {
			t.Fatalf("pod %s runs on host-local but has no host-local file: %v", p.Name, err)
		}
	}

	// Switch to hostlease; two more pods.
	if err := c.WriteConflist("10-hlk8s.conflist", hostlease()); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "-n", ns, "scale", "deployment", "legacy", "--replicas=4")
	all := waitPodsRunning(t, c, ns, 4)
	for _, p := range all {
		if name, ok := legacyIP[p.IP]; ok && name != p.Name {
			t.Errorf("new pod %s got %s, still in use by %s", p.Name, p.IP, name)
		}
	}
	imported := 0
	for _, r := range records(t) {
		if r.Network == netName && legacyIP[r.IP.String()] != "" {
			imported++
			if r.State != allocator.StateCommitted {
				t.Errorf("imported record %s is %s, want committed", r.IP, r.State)
			}
		}
	}
	if imported != 2 {
		t.Errorf("%d of the 2 host-local addresses imported into the store", imported)
	}

	// The old pods go: their teardown (through hostlease now) releases the
	// imported records.
	for _, p := range legacy {
		kubectl(t, c, "-n", ns, "delete", "pod", p.Name, "--wait=true")
	}
	waitUntil(t, 2*time.Minute, "imported records released", func() (bool, string) {
		for _, r := range records(t) {
			if r.Network == netName && legacyIP[r.IP.String()] != "" && r.Source == "host-local" {
				return false, "still held: " + r.IP.String()
			}
		}
		return true, ""
	})
	running := waitPodsRunning(t, c, ns, 4)

	// Roll back: export, then host-local again; a new pod does not get an
	// address a running pod holds.
	gcBin := mustProjectBin(t, "hostlease-gc")
	if out, err := exec.Command(gcBin, "export", "--network", netName, "--data-dir", CNIDataDir, "--host-local-dir", CNIDataDir).CombinedOutput(); err != nil {
		t.Fatalf("hostlease-gc export: %v\n%s", err, out)
	}
	inUse := map[string]string{}
	for _, p := range running {
		inUse[p.IP] = p.Name
		if _, err := os.Stat(filepath.Join(CNIDataDir, netName, p.IP)); err != nil {
			t.Errorf("export wrote no host-local file for %s (pod %s): %v", p.IP, p.Name, err)
		}
	}
	if err := c.WriteConflist("10-hlk8s.conflist", hostLocal()); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "-n", ns, "scale", "deployment", "legacy", "--replicas=5")
	for _, p := range waitPodsRunning(t, c, ns, 5) {
		if name, ok := inUse[p.IP]; ok && name != p.Name {
			t.Errorf("after the rollback, pod %s got %s, in use by %s", p.Name, p.IP, name)
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// podConflistDataDir is podConflist with another dataDir.
func podConflistDataDir(subnet, dataDir string) []byte {
	ipam := map[string]any{"type": "hostlease", "ranges": [][]map[string]string{{{"subnet": subnet}}}, "dataDir": dataDir}
	plugins := []map[string]any{{"type": "bridge", "bridge": PodBridge, "isGateway": true, "ipam": ipam},
		{"type": "hostlease", "dataDir": dataDir}}
	b, _ := json.MarshalIndent(map[string]any{"cniVersion": "1.1.0", "name": PodNetwork, "plugins": plugins}, "", "  ")
	return b
}

func itoa(i int) string { return strconv.Itoa(i) }
