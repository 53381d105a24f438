// Package gcintegration runs the real hostlease-gc daemon as a process against
// stores written by real hostlease plugin processes and a real gRPC CRI server
// (fakecri_test.go) whose sandboxes each test controls, and asserts what an
// operator would see: the stores (through `hostlease-gc list/status -o json`),
// the audit log, the daemon's log and its /metrics.
//
// TestMain builds bin/hostlease and bin/hostlease-gc into a temporary directory.
package gcintegration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/gcproc"
	"github.com/hostlease/hostlease/internal/testing/promtext"
	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	gcdaemon "github.com/hostlease/hostlease/pkg/daemon"
)

var binDir string

func pluginBin() string { return filepath.Join(binDir, "hostlease") }
func gcBin() string     { return filepath.Join(binDir, "hostlease-gc") }

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, "gcintegration", map[string]string{"hostlease": testbin.Plugin, "hostlease-gc": testbin.GC}, &binDir))
}

// ---------------------------------------------------------------------------
// A node: one network's data dir, netns dir and fake runtime.

const network = "gcnet"

// node is one test's node: a data dir holding the network's store, a netns
// dir (the daemon's --netns-dir) and the fake runtime.
type node struct {
	t        *testing.T
	dataDir  string
	netnsDir string
	cri      *fakeCRI
	conf     []byte
}

// newNode makes a node whose pool is 10.77.0.10 .. 10.77.0.(9+size), with the
// gateway (10.77.0.1) outside it, so the pool holds exactly size addresses.
func newNode(t *testing.T, size int) *node {
	t.Helper()
	n := &node{t: t, dataDir: t.TempDir(), netnsDir: t.TempDir(), cri: startFakeCRI(t)}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       network,
		"type":       "bridge",
		"ipam": map[string]any{
			"type":        "hostlease",
			"dataDir":     n.dataDir,
			"lockTimeout": lockTimeout.String(),
			"ranges": [][]map[string]string{{{
				"subnet":     "10.77.0.0/24",
				"rangeStart": "10.77.0.10",
				"rangeEnd":   fmt.Sprintf("10.77.0.%d", 9+size),
				"gateway":    "10.77.0.1",
			}}},
		},
	}
	var err error
	if n.conf, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockTimeout is the plugin's ipam.lockTimeout in these tests.
const lockTimeout = 5 * time.Second

func (n *node) storePath() string { return store.FilePath(n.dataDir, network) }

func (n *node) netns(id string) string { return filepath.Join(n.netnsDir, "cni-"+id) }

// outcome is one plugin process's result.
type outcome = cniexec.Outcome

// plugin runs bin/hostlease once as a runtime would, with the pod's
// metadata in CNI_ARGS.
func (n *node) plugin(command, id string, conf []byte) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBin())
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=" + id,
		"CNI_NETNS=" + n.netns(id),
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + binDir,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-" + id + ";K8S_POD_UID=uid-" + id + ";K8S_POD_INFRA_CONTAINER_ID=" + id,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	return cniexec.Classify(err, stdout.Bytes(), stderr.Bytes(), time.Since(start))
}

// tryAdd runs IPAM ADD for sandbox id. The runtime creates the sandbox's
// netns before ADD, so its file is created first.
func (n *node) tryAdd(id string) outcome {
	if err := os.WriteFile(n.netns(id), nil, 0o600); err != nil {
		return outcome{ExitErr: err}
	}
	return n.plugin("ADD", id, n.conf)
}

// add runs IPAM ADD for sandbox id and returns the address it got.
func (n *node) add(id string) netip.Addr {
	n.t.Helper()
	o := n.tryAdd(id)
	if !o.OK() {
		n.t.Fatalf("ADD %s: %s", id, o)
	}
	ip, err := resultIP(o.Stdout)
	if err != nil {
		n.t.Fatalf("ADD %s: %v", id, err)
	}
	return ip
}

// del runs IPAM DEL for sandbox id.
func (n *node) del(id string) outcome { return n.plugin("DEL", id, n.conf) }

// commitMarker runs the commit marker (hostlease as the last plugin of the
// conflist, no ipam section) for sandbox id: the whole chain succeeded.
func (n *node) commitMarker(id string) {
	n.t.Helper()
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": network, "type": "hostlease", "dataDir": n.dataDir})
	if o := n.plugin("ADD", id, conf); !o.OK() {
		n.t.Fatalf("commit marker ADD %s: %s", id, o)
	}
}

func resultIP(stdout []byte) (netip.Addr, error) { return cniexec.ResultIP(stdout) }

// ---------------------------------------------------------------------------
// The CLI, as an operator runs it.

// gcCLI runs bin/hostlease-gc with args and returns stdout, stderr and the
// exit code.
func gcCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gcBin(), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("hostlease-gc %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

// records reads the network's allocations with `hostlease-gc list -o json`.
func (n *node) records() map[string]allocator.Record {
	n.t.Helper()
	out, errOut, code := gcCLI(n.t, "list", "--data-dir", n.dataDir, "--network", network, "-o", "json")
	if code != 0 {
		n.t.Fatalf("hostlease-gc list: exit %d: %s", code, errOut)
	}
	// A store with damaged records makes list exit non-zero (above).
	recs, _, err := gcdaemon.DecodeList([]byte(out))
	if err != nil {
		n.t.Fatalf("hostlease-gc list -o json: %v\n%s", err, out)
	}
	m := map[string]allocator.Record{}
	for _, r := range recs {
		m[r.ContainerID] = r
	}
	return m
}

// pool reads the network's only range set with `hostlease-gc status -o json`.
func (n *node) pool() gcdaemon.PoolRow {
	n.t.Helper()
	out, errOut, code := gcCLI(n.t, "status", "--data-dir", n.dataDir, "-o", "json")
	if code != 0 {
		n.t.Fatalf("hostlease-gc status: exit %d: %s", code, errOut)
	}
	rows, err := gcdaemon.DecodeRows[gcdaemon.PoolRow]([]byte(out))
	if err != nil {
		n.t.Fatalf("hostlease-gc status -o json: %v\n%s", err, out)
	}
	if len(rows) != 1 || rows[0].Network != network {
		n.t.Fatalf("hostlease-gc status: want one row for %s, got %s", network, out)
	}
	return rows[0]
}

// audit reads the network's audit log, oldest first, with
// `hostlease-gc audit -o json`.
func (n *node) audit() []allocator.AuditEvent {
	n.t.Helper()
	out, errOut, code := gcCLI(n.t, "audit", "--data-dir", n.dataDir, "--network", network, "--limit", "100000", "-o", "json")
	if code != 0 {
		n.t.Fatalf("hostlease-gc audit: exit %d: %s", code, errOut)
	}
	rows, err := gcdaemon.DecodeRows[gcdaemon.AuditRow]([]byte(out))
	if err != nil {
		n.t.Fatalf("hostlease-gc audit -o json: %v\n%s", err, out)
	}
	evs := make([]allocator.AuditEvent, len(rows))
	for i, r := range rows {
		evs[i] = r.AuditEvent
	}
	return evs
}

// leaksJSON runs `hostlease-gc leaks -o json` with the daemon's policy flags.
func (n *node) leaksJSON(policy ...string) []gcdaemon.LeakRow {
	n.t.Helper()
	args := append([]string{"leaks", "--cri-endpoint", n.cri.Endpoint(), "--data-dir", n.dataDir, "--netns-dir", n.netnsDir, "--no-api", "-o", "json"}, policy...)
	out, errOut, code := gcCLI(n.t, args...)
	if code != 0 {
		n.t.Fatalf("hostlease-gc leaks: exit %d: %s", code, errOut)
	}
	rows, err := gcdaemon.DecodeRows[gcdaemon.LeakRow]([]byte(out))
	if err != nil {
		n.t.Fatalf("hostlease-gc leaks -o json: %v\n%s", err, out)
	}
	return rows
}

// ---------------------------------------------------------------------------
// The daemon process.

// daemon is one test's `hostlease-gc run` process (internal/testing/gcproc).
type daemon struct {
	*gcproc.Daemon
	t    *testing.T
	logs daemonLog
}

// baseFlags are the daemon flags every test starts from; extra flags given to
// startDaemon come after them and win.
func (n *node) baseFlags() []string {
	return []string{
		"run",
		"--cri-endpoint", n.cri.Endpoint(),
		"--data-dir", n.dataDir,
		"--interval", "1s",
		"--misses", "2",
		"--grace", "0s",
		"--min-age", "0s",
		"--netns-grace", "0s",
		// These nodes hold a handful of records, most of them leaks: the
		// guard (a share of the records held) is what guard_test.go tests.
		"--max-reclaim-fraction", "1",
		"--netns-dir", n.netnsDir,
		"--no-api",
		"--metrics-addr", "127.0.0.1:0", // the daemon logs the port it got
		"--log-format", "json",
	}
}

// startDaemon runs `hostlease-gc run` until the test ends (or stop).
func (n *node) startDaemon(extra ...string) *daemon {
	t := n.t
	t.Helper()
	p, err := gcproc.Start(gcBin(), append(n.baseFlags(), extra...), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{Daemon: p, t: t, logs: daemonLog{p}}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("hostlease-gc log:\n%s", strings.Join(d.Lines(), "\n"))
		}
	})
	return d
}

// stopClean stops the daemon as a DaemonSet rollout does and checks that it
// exits by itself on SIGTERM with status 0 (it was not killed).
func (d *daemon) stopClean() {
	d.t.Helper()
	d.alive()
	if d.Stop() {
		d.t.Errorf("hung: hostlease-gc still ran %s after SIGTERM and was killed", gcproc.HangGuard)
	}
	if !d.Cmd.ProcessState.Success() {
		d.t.Errorf("hostlease-gc exited %v on SIGTERM, want status 0", d.Cmd.ProcessState)
	}
}

// alive fails the test if the daemon has exited.
func (d *daemon) alive() {
	d.t.Helper()
	select {
	case <-d.Done():
		d.t.Fatalf("hostlease-gc run exited: %v", d.Cmd.ProcessState)
	default:
	}
}

// scrape reads /metrics.
func (d *daemon) scrape() metrics {
	d.t.Helper()
	m, err := d.Scrape()
	if err != nil {
		d.t.Fatalf("scraping hostlease-gc: %v", err)
	}
	return m
}

// sweeps is hostlease_sweeps_total over every result.
func (m metrics) sweeps() float64 { return m.sum("hostlease_sweeps_total", nil) }

// daemonLog is the daemon's JSON log, in the order it was written.
type daemonLog struct{ p *gcproc.Daemon }

func (l daemonLog) all() []string                       { return l.p.Lines() }
func (l daemonLog) entries(msg string) []map[string]any { return l.p.Entries(msg) }
func (l daemonLog) sequence() []map[string]any          { return l.p.Sequence() }

// ---------------------------------------------------------------------------
// Prometheus text format, enough of it for these assertions.

type sample = promtext.Sample

type metrics []sample

// get returns the value of the one series of name whose labels include
// labels, and whether it exists.
func (m metrics) get(name string, labels map[string]string) (float64, bool) {
	var v float64
	n := 0
	for _, s := range m.match(name, labels) {
		v = s.Value
		n++
	}
	return v, n == 1
}

// sum adds every series of name whose labels include labels.
func (m metrics) sum(name string, labels map[string]string) float64 {
	v := 0.0
	for _, s := range m.match(name, labels) {
		v += s.Value
	}
	return v
}

func (m metrics) match(name string, labels map[string]string) []sample {
	var out []sample
next:
	for _, s := range m {
		if s.Name != name {
			continue
		}
		for k, v := range labels {
			if s.Labels[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// value is get, failing the test when the series is missing.
func (m metrics) value(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := m.get(name, labels)
	if !ok {
		t.Fatalf("metric %s%v: not exported (or not unique)", name, labels)
	}
	return v
}

// ---------------------------------------------------------------------------

// hangGuard bounds every wait in these tests. It is a guard against a hung
// test, not an assertion: what a test asserts is that an event happens (and
// in which order), never how fast; it is generous for a loaded machine.
const hangGuard = gcproc.HangGuard

// eventually polls cond until it holds and returns how long that took (for
// logs only); cond returns whether it holds and, if not, what it saw. If cond
// does not hold within hangGuard the test fails as hung.
func eventually(t *testing.T, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(hangGuard)
	last := ""
	for {
		ok, saw := cond()
		if ok {
			return time.Since(start)
		}
		last = saw
		if time.Now().After(deadline) {
			t.Fatalf("hung: %s did not happen within the %s hang guard; last saw: %s", what, hangGuard, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// lbl builds a label set: lbl("network", "n", "reason", "r").
func lbl(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
