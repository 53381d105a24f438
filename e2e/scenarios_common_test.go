package e2e

// Helpers shared by the scenario tests (scenarios_*_test.go) and the demo:
// a conflist with hostlease (or host-local) as IPAM, reading the store through
// the operator CLI, and polling with deadlines.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// setupHostlease starts an env whose CNI bin dir also holds bin/hostlease.
// It skips when not root (as harness.Setup does) and fails when the project
// binaries are not built.
func setupHostlease(t *testing.T) *harness.Env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e: skipped: needs root (runs containerd, runc and CNI plugins that create namespaces and bridges)")
	}
	bin, err := harness.ProjectBin("hostlease")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.ProjectBin("hostlease-gc"); err != nil {
		t.Fatal(err)
	}
	return harness.SetupWith(t, harness.Options{ExtraBins: map[string]string{"hostlease": bin}})
}

// netOpts shape a test network's conflist:
//
//	[bridge(ipam: IPAM), failplugin (when FailPlugin), hostlease marker (when Marker)]
type netOpts struct {
	IPAM       string // "hostlease" (default) or "host-local"
	Subnet     string // 10.99.x.0/24 private to the test
	RangeStart string
	RangeEnd   string
	FailPlugin bool
	Marker     bool
	// FailStatusOnExhaustion sets the ipam key when not nil.
	FailStatusOnExhaustion *bool
}

// testNet is one test's network: its conflist, its state and trigger files.
type testNet struct {
	Network, Bridge string
	Opts            netOpts
	DataDir         string // ipam dataDir: hostlease's <net>.db or host-local's <net>/
	FailAdd         string
	FailDel         string
	DelayAdd        string
	HoldAdd         string // while it exists the failplugin's ADD waits
	FailPlugLog     string
	File            string // conflist file name in the env's conf dir

	env *harness.Env
}

// newNet writes the network's conflist into env and waits until containerd
// loaded it.
func newNet(t *testing.T, env *harness.Env, o netOpts) *testNet {
	t.Helper()
	if o.IPAM == "" {
		o.IPAM = "hostlease"
	}
	suffix := randHex(t, 3)
	n := &testNet{
		Network:     "hls-" + suffix,
		Bridge:      "hls" + suffix,
		Opts:        o,
		DataDir:     filepath.Join(env.Dir, "ipam"),
		FailAdd:     filepath.Join(env.Dir, "fail-add"),
		FailDel:     filepath.Join(env.Dir, "fail-del"),
		DelayAdd:    filepath.Join(env.Dir, "delay-add"),
		HoldAdd:     filepath.Join(env.Dir, "hold-add"),
		FailPlugLog: filepath.Join(env.Dir, "failplugin.log"),
		env:         env,
	}
	n.File = "10-" + n.Network + ".conflist"
	env.WriteConflist(n.File, n.conflist())
	env.WaitNetworkReady(n.Network, hangGuard)
	return n
}

// conflist renders the network's config from n.Opts.
func (n *testNet) conflist() []byte {
	o := n.Opts
	rng := map[string]string{"subnet": o.Subnet}
	if o.RangeStart != "" {
		rng["rangeStart"] = o.RangeStart
	}
	if o.RangeEnd != "" {
		rng["rangeEnd"] = o.RangeEnd
	}
	ipam := map[string]any{
		"type":    o.IPAM,
		"ranges":  [][]map[string]string{{rng}},
		"dataDir": n.DataDir,
	}
	if o.FailStatusOnExhaustion != nil {
		ipam["failStatusOnExhaustion"] = *o.FailStatusOnExhaustion
	}
	plugins := []any{map[string]any{
		"type":      "bridge",
		"bridge":    n.Bridge,
		"isGateway": false, // no address or route on the host
		"ipMasq":    false, // no iptables rules
		"ipam":      ipam,
	}}
	if o.FailPlugin {
		plugins = append(plugins, map[string]any{
			"type":         harness.FailPlugin,
			"failAddFile":  n.FailAdd,
			"failDelFile":  n.FailDel,
			"delayAddFile": n.DelayAdd,
			"holdAddFile":  n.HoldAdd,
			"logFile":      n.FailPlugLog,
		})
	}
	if o.Marker {
		// The commit marker: same binary, no ipam, the same dataDir.
		plugins = append(plugins, map[string]any{"type": "hostlease", "dataDir": n.DataDir})
	}
	b, err := json.MarshalIndent(map[string]any{"cniVersion": n.env.CNIVersion(), "name": n.Network, "plugins": plugins}, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

// StorePath is hostlease's store of the network.
func (n *testNet) StorePath() string { return store.FilePath(n.DataDir, n.Network) }

func (n *testNet) touch(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (n *testNet) remove(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// breakChain makes the failplugin fail ADD and DEL: containerd #12130.
func (n *testNet) breakChain(t *testing.T) {
	t.Helper()
	n.touch(t, n.FailAdd, "injected by "+t.Name())
	n.touch(t, n.FailDel, "injected by "+t.Name())
}

// healChain removes the failplugin's trigger files.
func (n *testNet) healChain(t *testing.T) {
	t.Helper()
	n.remove(t, n.FailAdd, n.FailDel, n.DelayAdd, n.HoldAdd)
}

// records lists the network's allocations through `hostlease-gc list -o json`
// (none when the store does not exist yet).
func (n *testNet) records(t *testing.T) []*allocator.Record {
	t.Helper()
	if _, err := os.Stat(n.StorePath()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := n.env.GC("list", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", n.DataDir, "--network", n.Network)
	if err != nil {
		t.Fatal(err)
	}
	list, damaged, err := daemon.DecodeList(out)
	if err != nil {
		t.Fatalf("hostlease-gc list -o json does not decode into its rows: %v\n%s", err, out)
	}
	if len(damaged) != 0 {
		t.Fatalf("hostlease-gc list -o json: damaged records %+v", damaged)
	}
	recs := make([]*allocator.Record, len(list))
	for i := range list {
		recs[i] = &list[i]
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].IP.Less(recs[j].IP) })
	return recs
}

// byIP indexes records by address.
func byIP(recs []*allocator.Record) map[string]*allocator.Record {
	m := map[string]*allocator.Record{}
	for _, r := range recs {
		m[r.IP.String()] = r
	}
	return m
}

// pool is one range set of a network, as `hostlease-gc status -o json` shows
// it, with its sizes as numbers.
type pool struct {
	daemon.PoolRow
	Size, Free float64
}

// pool returns the network's range set 0 from `hostlease-gc status -o json`.
func (n *testNet) pool(t *testing.T) pool {
	t.Helper()
	out, err := n.env.GC("status", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", n.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := daemon.DecodeRows[daemon.PoolRow](out)
	if err != nil {
		t.Fatalf("hostlease-gc status -o json does not decode into its rows: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r.Network == n.Network && r.RangeSet == 0 {
			size, err1 := strconv.ParseFloat(r.Size, 64)
			free, err2 := strconv.ParseFloat(r.Free, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("hostlease-gc status: size %q free %q are not numbers", r.Size, r.Free)
			}
			return pool{PoolRow: r, Size: size, Free: free}
		}
	}
	t.Fatalf("hostlease-gc status has no range set 0 for %s: %s", n.Network, out)
	return pool{}
}

// audit reads the network's audit log, oldest first, through
// `hostlease-gc audit -o json` (a short read-only open, as the daemon does).
func (n *testNet) audit(t *testing.T) []allocator.AuditEvent {
	t.Helper()
	evs, err := n.readAudit()
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// readAudit is audit returning the error, for polling a store that may be
// being created.
func (n *testNet) readAudit() ([]allocator.AuditEvent, error) {
	out, err := n.env.GC("audit", "-o", "json", "--limit", "100000", "--lock-timeout", harness.OracleLockWait, "--data-dir", n.DataDir, "--network", n.Network)
	if err != nil {
		return nil, err
	}
	rows, err := daemon.DecodeRows[daemon.AuditRow](out)
	if err != nil {
		return nil, fmt.Errorf("hostlease-gc audit -o json does not decode into its rows: %w\n%s", err, out)
	}
	evs := make([]allocator.AuditEvent, len(rows))
	for i, r := range rows {
		evs[i] = r.AuditEvent
	}
	return evs, nil
}

// auditReason is the reason code of an audit event ("netns_gone" of
// "netns_gone: sandbox absent ...").
func auditReason(ev allocator.AuditEvent) string {
	r, _, _ := strings.Cut(ev.Reason, ":")
	return r
}

// reclaims are the audit log's reclaim events, oldest first: what the
// daemon did, written in the same transaction that freed the addresses.
func (n *testNet) reclaims(t *testing.T) []allocator.AuditEvent {
	t.Helper()
	var out []allocator.AuditEvent
	for _, ev := range n.audit(t) {
		if ev.Action == "reclaim" {
			out = append(out, ev)
		}
	}
	return out
}

// waitReclaims waits until the audit log holds exactly want reclaims (more
// fails at once) and returns them.
func (n *testNet) waitReclaims(t *testing.T, want int, why func() string) []allocator.AuditEvent {
	t.Helper()
	var evs []allocator.AuditEvent
	waitFor(t, fmt.Sprintf("%d reclaims in the audit log", want), func() (bool, string) {
		evs = n.reclaims(t)
		if len(evs) > want {
			t.Fatalf("the audit log holds %d reclaims, more than the %d leaks: %+v", len(evs), want, evs)
		}
		return len(evs) == want, fmt.Sprintf("%d reclaims; %s", len(evs), why())
	})
	return evs
}

// waitEvents waits until the daemon's log holds at least want records with
// message msg and returns them: the log is written after the store, so a
// test that narrates the daemon's log lines waits for them here.
func waitEvents(t *testing.T, d *harness.Daemon, msg string, want int) []map[string]any {
	t.Helper()
	var evs []map[string]any
	waitFor(t, fmt.Sprintf("%d %q lines in hostlease-gc's log", want, msg), func() (bool, string) {
		evs = d.Events(msg)
		return len(evs) >= want, d.LogTail(5)
	})
	return evs
}

// waitMetrics waits until cond holds for a scrape and returns that scrape:
// the daemon updates its metrics at the end of a sweep, after the store.
func waitMetrics(t *testing.T, d *harness.Daemon, what string, cond func(harness.MetricSet) bool) harness.MetricSet {
	t.Helper()
	var m harness.MetricSet
	waitFor(t, what, func() (bool, string) {
		m = metrics(t, d)
		return cond(m), m.Raw
	})
	return m
}

// hiddenNetnsDir is a --netns-dir that holds none of the env's pod netns, as
// on a node where the daemon's pod does not mount the runtime's netns dir:
// the daemon has no proof of any teardown and must go by misses, grace and
// min-age.
func hiddenNetnsDir(t *testing.T, env *harness.Env) string {
	t.Helper()
	dir := filepath.Join(env.Dir, "netns-not-mounted")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostLocalLeases returns host-local's reservations (ip -> container ID).
func (n *testNet) hostLocalLeases(t *testing.T) map[string]string {
	t.Helper()
	c := &chain{HostLocal: n.DataDir, Network: n.Network}
	return c.leases(t)
}

// failCalls counts the failplugin's logged calls (see chain.failpluginCalls).
func (n *testNet) failCalls(t *testing.T) map[string]int {
	t.Helper()
	c := &chain{FailPlugLog: n.FailPlugLog}
	return c.failpluginCalls(t)
}

// failedAddIDs are the container IDs of the failplugin's failed ADDs.
func (n *testNet) failedAddIDs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(n.FailPlugLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec map[string]string
		if json.Unmarshal([]byte(line), &rec) == nil && rec["verb"] == "ADD" && rec["error"] != "" {
			ids = append(ids, rec["containerID"])
		}
	}
	return ids
}

// runPod starts a sandbox that must come up READY with one address of the
// network's subnet, and returns its ID and address.
func (n *testNet) runPod(t *testing.T, p harness.Pod) (string, string) {
	t.Helper()
	start := time.Now()
	id, err := n.env.RunPodSandbox(context.Background(), p)
	if err != nil {
		t.Fatalf("RunPodSandbox %s/%s: %v\n%s", p.Namespace, p.Name, err, n.env.LogTail(30))
	}
	st, ips, err := n.env.PodSandboxStatus(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	_, subnet, _ := net.ParseCIDR(n.Opts.Subnet)
	if st.State.String() != "SANDBOX_READY" || len(ips) != 1 || !subnet.Contains(net.ParseIP(ips[0])) {
		t.Fatalf("pod %s: state %v IPs %v; want SANDBOX_READY with one address of %s", p.Name, st.State, ips, n.Opts.Subnet)
	}
	t.Logf("pod %s/%s: sandbox %s READY with %s (RunPodSandbox %v)", p.Namespace, p.Name, id[:12], ips[0], time.Since(start).Round(time.Millisecond))
	return id, ips[0]
}

// failPod makes one RunPodSandbox attempt that must fail with an error
// containing want, then does what kubelet does with a failed sandbox the
// runtime still lists (kubeletCleanup: stop, remove) and returns those
// sandboxes as they were listed (containerd 1.7 keeps a sandbox whose
// cleanup DEL failed; see runtimeFacts).
func (n *testNet) failPod(t *testing.T, p harness.Pod, want string) []*runtimeapi.PodSandbox {
	t.Helper()
	id, err := n.env.RunPodSandbox(context.Background(), p)
	if err == nil {
		t.Fatalf("RunPodSandbox %s attempt %d succeeded (sandbox %s); want a failure containing %q", p.Name, p.Attempt, id[:12], want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("RunPodSandbox %s attempt %d failed for another reason: %v", p.Name, p.Attempt, err)
	}
	return kubeletCleanup(t, n.env, p)
}

// stopRemove stops and removes a sandbox, which must both succeed.
func (n *testNet) stopRemove(t *testing.T, id string) {
	t.Helper()
	if err := n.env.StopPodSandbox(context.Background(), id); err != nil {
		t.Fatalf("StopPodSandbox %s: %v\n%s", id[:12], err, n.env.LogTail(30))
	}
	if err := n.env.RemovePodSandbox(context.Background(), id); err != nil {
		t.Fatalf("RemovePodSandbox %s: %v\n%s", id[:12], err, n.env.LogTail(30))
	}
}

// execPlugin runs the env's copy of bin/hostlease directly with a CNI verb,
// the way libcni would: stdin is the bridge entry of the conflist with name
// and cniVersion injected (what bridge hands its IPAM plugin).
func (n *testNet) execPlugin(t *testing.T, verb, containerID, netns string) (string, error) {
	t.Helper()
	var list struct {
		Name       string           `json:"name"`
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(n.conflist(), &list); err != nil {
		t.Fatal(err)
	}
	conf := list.Plugins[0]
	conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
	stdin, _ := json.Marshal(conf)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.env.CNIBinDir, "hostlease"))
	cmd.Stdin = strings.NewReader(string(stdin))
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+verb, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME=eth0", "CNI_PATH="+n.env.CNIBinDir, "CNI_ARGS=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// hangGuard bounds every wait of these scenarios: a guard against a hung
// test, not an assertion. What a scenario asserts is that events happen and
// in which order (audit log, daemon log, metrics), never how fast.
const hangGuard = 3 * time.Minute

// waitFor polls cond every 50ms until it holds and returns how long that
// took (for the narration only); if cond does not hold within hangGuard the
// test fails as hung with what cond last said.
func waitFor(t *testing.T, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(hangGuard)
	for {
		ok, last := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("hung: %s did not happen within the %v hang guard; last: %s", what, hangGuard, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metrics scrapes the daemon and fails the test if it cannot.
func metrics(t *testing.T, d *harness.Daemon) harness.MetricSet {
	t.Helper()
	m, err := d.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// metric returns one summed metric value (0 when absent).
func metric(t *testing.T, d *harness.Daemon, name string, labels ...string) float64 {
	t.Helper()
	v, _ := metrics(t, d).Sum(name, labels...)
	return v
}

// sweeps is hostlease_sweeps_total over all results.
func sweeps(t *testing.T, d *harness.Daemon) float64 { return metric(t, d, "hostlease_sweeps_total") }

// podUID makes a stable pod UID for a test pod name.
func podUID(name string) string { return "uid-" + name + "-0000-4000-8000-e2e" }

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// ipsOf lists the addresses of records.
func ipsOf(recs []*allocator.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.IP.String())
	}
	return out
}

// describe prints records one per line for the test log.
func describe(recs []*allocator.Record) string {
	if len(recs) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "\n      %-12s %-9s sandbox %.12s pod %s/%s uid %s misses %d verdict %q",
			r.IP, r.State, r.ContainerID, r.PodNamespace, r.PodName, r.PodUID, r.Obs.Misses, r.Obs.Verdict)
	}
	return b.String()
}
