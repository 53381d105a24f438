// Package e2e holds the end-to-end tests of hostlease against a real
// containerd (CRI; one version per test process, see harness.SelectedVersion)
// and real CNI plugins; see README.md. The tests in this
// file prove the environment itself works and pin down the containerd
// behaviour hostlease exists for (containerd issue #12130).
package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// chain describes the conflist [bridge(ipam: host-local), failplugin] of one
// test: a bridge and subnet private to the test, host-local state and the
// failplugin trigger files in the env dir.
type chain struct {
	Network     string
	Bridge      string
	Subnet      string
	HostLocal   string // host-local dataDir; leases are HostLocal/Network/<ip>
	FailAdd     string
	FailDel     string
	DelayAdd    string
	HoldAdd     string
	FailPlugLog string
}

// newChain writes the conflist into env and waits until containerd loaded it.
func newChain(t *testing.T, env *harness.Env, subnet string) *chain {
	t.Helper()
	suffix := randHex(t, 3)
	c := &chain{
		Network:     "hle2e-" + suffix,
		Bridge:      "hle2e" + suffix, // <= 15 chars
		Subnet:      subnet,
		HostLocal:   filepath.Join(env.Dir, "host-local"),
		FailAdd:     filepath.Join(env.Dir, "fail-add"),
		FailDel:     filepath.Join(env.Dir, "fail-del"),
		DelayAdd:    filepath.Join(env.Dir, "delay-add"),
		HoldAdd:     filepath.Join(env.Dir, "hold-add"),
		FailPlugLog: filepath.Join(env.Dir, "failplugin.log"),
	}
	conf := map[string]any{
		"cniVersion": env.CNIVersion(),
		"name":       c.Network,
		"plugins": []any{
			map[string]any{
				"type":      "bridge",
				"bridge":    c.Bridge,
				"isGateway": false, // no address or route on the host
				"ipMasq":    false, // no iptables rules
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": subnet}}},
					"dataDir": c.HostLocal,
				},
			},
			map[string]any{
				"type":         harness.FailPlugin,
				"failAddFile":  c.FailAdd,
				"failDelFile":  c.FailDel,
				"delayAddFile": c.DelayAdd,
				"holdAddFile":  c.HoldAdd,
				"logFile":      c.FailPlugLog,
			},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	env.WriteConflist("10-"+c.Network, b)
	env.WaitNetworkReady(c.Network, hangGuard)
	return c
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// leases returns host-local's reservations of the chain's network as
// ip -> file content (first line: container ID).
func (c *chain) leases(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(c.HostLocal, c.Network)
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return map[string]string{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if net.ParseIP(e.Name()) == nil {
			continue // lock, last_reserved_ip.0
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	return out
}

func (c *chain) touch(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// failpluginCalls counts the failplugin's logged invocations per verb, and
// failed ones under "<VERB> failed".
func (c *chain) failpluginCalls(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile(c.FailPlugLog)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec map[string]string
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		out[rec["verb"]]++
		if rec["error"] != "" {
			out[rec["verb"]+" failed"]++
		}
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestEnvHealthySandbox: a healthy RunPodSandbox gets an address of the
// test's subnet, visible in PodSandboxStatus and host-local's state, and
// stop + remove release it.
func TestEnvHealthySandbox(t *testing.T) {
	fullSuiteOnly(t)
	env := harness.Setup(t)
	c := newChain(t, env, "10.99.1.0/24")
	ctx := context.Background()

	start := time.Now()
	id, err := env.RunPodSandbox(ctx, harness.Pod{Name: "healthy", Namespace: "e2e"})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, env.LogTail(40))
	}
	t.Logf("RunPodSandbox took %v", time.Since(start).Round(time.Millisecond))

	st, ips, err := env.PodSandboxStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.String() != "SANDBOX_READY" {
		t.Fatalf("state %v, want SANDBOX_READY", st.State)
	}
	_, subnet, _ := net.ParseCIDR(c.Subnet)
	if len(ips) != 1 || !subnet.Contains(net.ParseIP(ips[0])) {
		t.Fatalf("sandbox IPs %v, want one address in %s", ips, c.Subnet)
	}
	t.Logf("sandbox %s has IP %s", id[:12], ips[0])
	if l := c.leases(t); len(l) != 1 || l[ips[0]] != id {
		t.Fatalf("host-local leases %v, want exactly %s -> %s", l, ips[0], id)
	}
	list, err := env.ListPodSandbox(ctx)
	if err != nil || len(list) != 1 || list[0].Id != id {
		t.Fatalf("ListPodSandbox = %v, %v; want just %s", list, err, id)
	}

	start = time.Now()
	if err := env.StopPodSandbox(ctx, id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := env.RemovePodSandbox(ctx, id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	t.Logf("Stop+RemovePodSandbox took %v", time.Since(start).Round(time.Millisecond))
	if l := c.leases(t); len(l) != 0 {
		t.Fatalf("host-local still holds %v after stop+remove", l)
	}
	if list, err := env.ListPodSandbox(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListPodSandbox after remove = %v, %v; want empty", list, err)
	}
	calls := c.failpluginCalls(t)
	if calls["ADD"] != 1 || calls["DEL"] < 1 || calls["ADD failed"]+calls["DEL failed"] != 0 {
		t.Fatalf("failplugin calls %v, want 1 ADD and >=1 DEL, none failed", calls)
	}
}

// retries is how many RunPodSandbox attempts the #12130 tests make, as
// kubelet would for a pod whose network setup keeps failing.
const retries = 3

// attempt is what one failed RunPodSandbox left behind.
type attempt struct {
	Listed []*runtimeapi.PodSandbox // sandboxes of the pod CRI listed right after the failure (not READY)
	Leases []string                 // host-local leases after kubelet's cleanup
}

// runFailing makes retries RunPodSandbox calls for the same pod (a new
// attempt number each time, as kubelet does), each of which must fail, and
// after each one does kubelet's cleanup of a failed sandbox the runtime
// still lists (kubeletCleanup). It returns what each attempt left.
func runFailing(t *testing.T, env *harness.Env, c *chain) []attempt {
	t.Helper()
	var after []attempt
	pod := harness.Pod{Name: "chainfail", Namespace: "e2e"}
	for i := 0; i < retries; i++ {
		pod.Attempt = uint32(i)
		start := time.Now()
		id, err := env.RunPodSandbox(context.Background(), pod)
		if err == nil {
			t.Fatalf("attempt %d: RunPodSandbox succeeded (sandbox %s) although failAddFile exists", i+1, id)
		}
		if !strings.Contains(err.Error(), "failplugin: ADD failing on purpose") {
			t.Fatalf("attempt %d: RunPodSandbox failed for another reason: %v", i+1, err)
		}
		took := time.Since(start)
		listed := kubeletCleanup(t, env, pod)
		l := keys(c.leases(t))
		t.Logf("attempt %d: RunPodSandbox failed after %v; CRI listed %s; after kubelet's cleanup host-local holds %v",
			i+1, took.Round(time.Millisecond), describeSandboxes(listed), l)
		after = append(after, attempt{Listed: listed, Leases: l})
	}
	return after
}

// TestEnvChainFailAddOnly: the last plugin fails ADD, DEL works. containerd
// runs DEL over the whole chain after the failed ADD, host-local releases
// the address, nothing leaks and CRI forgets the sandbox, on every version.
func TestEnvChainFailAddOnly(t *testing.T) {
	env := harness.Setup(t)
	c := newChain(t, env, "10.99.2.0/24")
	c.touch(t, c.FailAdd, "injected by TestEnvChainFailAddOnly")

	after := runFailing(t, env, c)
	for i, a := range after {
		if len(a.Leases) != 0 || len(a.Listed) != 0 {
			t.Errorf("attempt %d left host-local leases %v and listed sandboxes %s; want none (DEL succeeded)", i+1, a.Leases, describeSandboxes(a.Listed))
		}
	}
	calls := c.failpluginCalls(t)
	t.Logf("containerd %s: failplugin calls: %v", env.Version, calls)
	if calls["ADD"] != retries || calls["DEL"] < retries || calls["DEL failed"] != 0 {
		t.Errorf("failplugin calls %v, want %d failed ADDs each followed by a successful DEL", calls, retries)
	}
	if list, err := env.ListPodSandbox(context.Background()); err != nil || len(list) != 0 {
		t.Errorf("ListPodSandbox = %v, %v; want empty", list, err)
	}
}

// TestEnvChainFailAddAndDel reproduces containerd #12130: the last plugin
// fails ADD and DEL. containerd calls DEL once after the failed ADD; it fails
// at the failplugin (libcni deletes in reverse order and stops at the first
// error, so bridge and host-local never see the DEL). Then, per version
// (runtimeFacts.FailedSandboxListed):
//   - 2.x drops the teardown error because setup produced no result and
//     forgets the sandbox: CRI lists nothing;
//   - 1.7 keeps the sandbox listed (NOTREADY, its name reserved); kubelet
//     stops it and removes it (both run DEL again, which fails and is
//     ignored, as the sandbox has no CNI result).
//
// Either way every retry leaks one more host-local address and no sandbox is
// left to show for it.
func TestEnvChainFailAddAndDel(t *testing.T) {
	env := harness.Setup(t)
	f := facts(env)
	c := newChain(t, env, "10.99.3.0/24")
	c.touch(t, c.FailAdd, "injected by TestEnvChainFailAddAndDel")
	c.touch(t, c.FailDel, "injected by TestEnvChainFailAddAndDel")

	after := runFailing(t, env, c)
	for i, a := range after {
		if len(a.Leases) != i+1 {
			t.Errorf("after attempt %d host-local holds %d addresses %v; want %d (one leak per retry)", i+1, len(a.Leases), a.Leases, i+1)
		}
		if listed := len(a.Listed) == 1; listed != f.FailedSandboxListed || len(a.Listed) > 1 {
			t.Errorf("containerd %s: after attempt %d CRI listed %s; want the failed sandbox listed: %v", env.Version, i+1, describeSandboxes(a.Listed), f.FailedSandboxListed)
		}
	}
	calls := c.failpluginCalls(t)
	t.Logf("containerd %s: failplugin calls: %v", env.Version, calls)
	// One DEL after each failed ADD; on versions that keep the sandbox two
	// more: kubelet's stop runs DEL (1.7.35 carries PR #12923 and ignores its
	// error), and RemovePodSandbox stops the sandbox again, running DEL once
	// more. All fail, all are ignored.
	wantDels := retries
	if f.FailedSandboxListed {
		wantDels = 3 * retries
	}
	if calls["ADD failed"] != retries || calls["DEL failed"] != calls["DEL"] || calls["DEL"] != wantDels {
		t.Errorf("failplugin calls %v, want %d failed ADDs and %d DELs, all failed", calls, retries, wantDels)
	}
	list, err := env.ListPodSandbox(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("ListPodSandbox lists %s; want nothing left", describeSandboxes(list))
	}
	t.Logf("leaked: %s", fmt.Sprint(c.leases(t)))
}

// TestEnvTeardownFailsAtStop: a READY sandbox whose chain's DEL fails when it
// is stopped. The sandbox has a CNI result, so every version returns the DEL
// error from StopPodSandbox and RemovePodSandbox and keeps the sandbox
// listed (NOTREADY) with its address held: nothing leaks, the runtime
// retries (kubelet keeps calling stop), and once DEL works the address is
// released.
func TestEnvTeardownFailsAtStop(t *testing.T) {
	env := harness.Setup(t)
	c := newChain(t, env, "10.99.6.0/24")
	ctx := context.Background()
	id, err := env.RunPodSandbox(ctx, harness.Pod{Name: "stuck", Namespace: "e2e"})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	_, ips, _ := env.PodSandboxStatus(ctx, id)
	c.touch(t, c.FailDel, "injected by TestEnvTeardownFailsAtStop")
	stopErr := env.StopPodSandbox(ctx, id)
	removeErr := env.RemovePodSandbox(ctx, id)
	list, err := env.ListPodSandbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leases := c.leases(t)
	t.Logf("containerd %s: DEL failing: StopPodSandbox -> %v; RemovePodSandbox -> %v; CRI lists %s; host-local holds %v",
		env.Version, stopErr, removeErr, describeSandboxes(list), keys(leases))
	if stopErr == nil || removeErr == nil || len(list) != 1 || list[0].Id != id || list[0].State == runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("want stop and remove to fail and the sandbox listed, not READY")
	}
	if len(leases) != 1 || leases[ips[0]] != id {
		t.Errorf("host-local holds %v; want %s still held by %s", leases, ips[0], id)
	}
	os.Remove(c.FailDel)
	if err := env.StopPodSandbox(ctx, id); err != nil {
		t.Fatalf("StopPodSandbox after DEL works again: %v", err)
	}
	if err := env.RemovePodSandbox(ctx, id); err != nil {
		t.Fatalf("RemovePodSandbox after DEL works again: %v", err)
	}
	if l := c.leases(t); len(l) != 0 {
		t.Errorf("host-local still holds %v after a successful stop+remove", l)
	}
}

// TestEnvStatusCalls: does CRI Status run CNI STATUS (runtimeFacts.CallsStatus)?
// Counts the failplugin's STATUS calls over a quiet window (no version polls
// by itself) and across one CRI Status call.
func TestEnvStatusCalls(t *testing.T) {
	env := harness.Setup(t)
	c := newChain(t, env, "10.99.7.0/24")
	want := 0
	if facts(env).CallsStatus {
		want = 1
	}
	quiet := 3 * time.Second
	before := c.failpluginCalls(t)["STATUS"]
	time.Sleep(quiet) // an observation window: nothing is expected to happen in it
	idle := c.failpluginCalls(t)["STATUS"] - before
	if _, _, err := env.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	perCall := c.failpluginCalls(t)["STATUS"] - before - idle
	t.Logf("containerd %s (conflist cniVersion %s): CNI STATUS calls: %d in %v without CRI Status calls, %d for one CRI Status call; GC calls %d",
		env.Version, env.CNIVersion(), idle, quiet, perCall, c.failpluginCalls(t)["GC"])
	if idle != 0 || perCall != want || c.failpluginCalls(t)["GC"] != 0 {
		t.Errorf("want 0 STATUS calls while nobody calls CRI Status, %d per Status call, and no GC call", want)
	}
}

// TestEnvRestartKeepsSandbox: a READY sandbox survives a containerd restart
// with the same IP, and can be stopped and removed afterwards.
func TestEnvRestartKeepsSandbox(t *testing.T) {
	fullSuiteOnly(t) // scenario 7 restarts containerd under live pods on every version
	env := harness.Setup(t)
	c := newChain(t, env, "10.99.4.0/24")
	ctx := context.Background()
	id, err := env.RunPodSandbox(ctx, harness.Pod{Name: "survivor", Namespace: "e2e"})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	_, before, err := env.PodSandboxStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	env.Restart()
	t.Logf("containerd restart took %v", time.Since(start).Round(time.Millisecond))
	env.WaitNetworkReady(c.Network, hangGuard)
	st, after, err := env.PodSandboxStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.String() != "SANDBOX_READY" || fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("after restart: state %v IPs %v; want SANDBOX_READY %v", st.State, after, before)
	}
	if err := env.StopPodSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := env.RemovePodSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if l := c.leases(t); len(l) != 0 {
		t.Fatalf("host-local still holds %v", l)
	}
}

// TestEnvCrashDuringAdd pins down a second leak path: containerd dies
// (SIGKILL) while a CNI ADD is in flight. During the ADD, host-local already
// holds the address but CRI lists no sandbox. After the restart CRI lists
// the sandbox as NOTREADY without an IP. StopPodSandbox and
// RemovePodSandbox succeed; whether the address leaks depends on the
// version (runtimeFacts.StopTearsDownWithoutResult): with containerd PR
// #12923 stop runs CNI DEL although the sandbox has no CNI result and
// host-local releases the address; without it (2.1.4) stop calls no DEL at
// all and the address leaks with no sandbox left to show for it.
func TestEnvCrashDuringAdd(t *testing.T) {
	env := harness.Setup(t)
	f := facts(env)
	c := newChain(t, env, "10.99.5.0/24")
	c.touch(t, c.HoldAdd, "held by TestEnvCrashDuringAdd")
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := env.RunPodSandbox(ctx, harness.Pod{Name: "inflight", Namespace: "e2e"})
		errc <- err
	}()
	// host-local has run once its lease file exists; the failplugin holds.
	waitFor(t, "a host-local lease while ADD is in flight", func() (bool, string) {
		return len(c.leases(t)) != 0, env.LogTail(30)
	})
	lease := keys(c.leases(t))
	list, err := env.ListPodSandbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ADD in flight: host-local holds %v, CRI lists %d sandboxes", lease, len(list))
	if len(list) != 0 {
		t.Errorf("CRI lists %d sandboxes during the ADD; expected none (in-flight sandboxes are invisible)", len(list))
	}

	env.Kill()
	if err := <-errc; err == nil {
		t.Fatal("RunPodSandbox succeeded although containerd was killed during it")
	}
	os.Remove(c.HoldAdd)
	env.Start()
	env.WaitNetworkReady(c.Network, hangGuard)

	list, err = env.ListPodSandbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].State.String() != "SANDBOX_NOTREADY" {
		t.Fatalf("after restart CRI lists %s; want one NOTREADY sandbox", describeSandboxes(list))
	}
	id := list[0].Id
	_, ips, err := env.PodSandboxStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after restart: CRI lists %s NOTREADY with IPs %v; host-local holds %v", id[:12], ips, keys(c.leases(t)))
	if l := c.leases(t); l[lease[0]] != id {
		t.Fatalf("host-local lease %v does not belong to the listed sandbox %s", l, id)
	}

	delsBefore := c.failpluginCalls(t)["DEL"]
	if err := env.StopPodSandbox(ctx, id); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := env.RemovePodSandbox(ctx, id); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	dels := c.failpluginCalls(t)["DEL"] - delsBefore
	left := keys(c.leases(t))
	list, _ = env.ListPodSandbox(ctx)
	t.Logf("containerd %s: after stop+remove: CRI lists %d sandboxes, host-local holds %v, stop+remove ran %d CNI DELs", env.Version, len(list), left, dels)
	if len(list) != 0 {
		t.Errorf("CRI still lists %s", describeSandboxes(list))
	}
	if f.StopTearsDownWithoutResult {
		if dels < 1 || len(left) != 0 {
			t.Errorf("containerd %s carries PR #12923: want stop to run DEL and host-local to release the address; got %d DELs, leases %v", env.Version, dels, left)
		}
	} else if dels != 0 || len(left) != 1 {
		t.Errorf("containerd %s lacks PR #12923: want no DEL and the address leaked; got %d DELs, leases %v", env.Version, dels, left)
	}
}
