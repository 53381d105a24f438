package crio

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// netOpts shape a test network's conflist:
//
//	[bridge(ipam: hostlease), failplugin (when FailPlugin), hostlease marker]
type netOpts struct {
	Subnet                 string // 10.97.x.0/24, private to the suite (the containerd suites use 10.99)
	RangeStart, RangeEnd   string
	FailPlugin             bool
	FailStatusOnExhaustion *bool
}

// testNet is one test's network on one node.
type testNet struct {
	Network, Bridge string
	Opts            netOpts
	DataDir         string
	FailAdd         string
	FailDel         string
	HoldAdd         string
	FailPlugLog     string
	File            string

	n *node
}

// newNet writes the network's conflist into the node's conf dir. CRI-O picks
// the conflist up through its inotify watch; the first CNI use waits for it.
func newNet(t *testing.T, n *node, o netOpts) *testNet {
	t.Helper()
	suffix := randHex(t, 3)
	tn := &testNet{
		Network:     "hlc-" + suffix,
		Bridge:      "hlc" + suffix,
		Opts:        o,
		DataDir:     filepath.Join(n.Dir, "ipam"),
		FailAdd:     filepath.Join(n.Dir, "fail-add"),
		FailDel:     filepath.Join(n.Dir, "fail-del"),
		HoldAdd:     filepath.Join(n.Dir, "hold-add"),
		FailPlugLog: filepath.Join(n.Dir, "failplugin.log"),
		n:           n,
	}
	tn.File = "10-" + tn.Network + ".conflist"
	n.bridges = append(n.bridges, tn.Bridge)
	n.networks = append(n.networks, tn.Network)
	tn.write(t)
	return tn
}

// write (re)writes the conflist atomically.
func (tn *testNet) write(t *testing.T) {
	t.Helper()
	p := filepath.Join(tn.n.CNIConfDir, tn.File)
	if err := os.WriteFile(p+".tmp", tn.conflist(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}

func (tn *testNet) conflist() []byte {
	o := tn.Opts
	rng := map[string]string{"subnet": o.Subnet}
	if o.RangeStart != "" {
		rng["rangeStart"] = o.RangeStart
	}
	if o.RangeEnd != "" {
		rng["rangeEnd"] = o.RangeEnd
	}
	ipam := map[string]any{"type": "hostlease", "ranges": [][]map[string]string{{rng}}, "dataDir": tn.DataDir}
	if o.FailStatusOnExhaustion != nil {
		ipam["failStatusOnExhaustion"] = *o.FailStatusOnExhaustion
	}
	plugins := []any{map[string]any{"type": "bridge", "bridge": tn.Bridge, "isGateway": false, "ipMasq": false, "ipam": ipam}}
	if o.FailPlugin {
		plugins = append(plugins, map[string]any{
			"type": harness.FailPlugin, "failAddFile": tn.FailAdd, "failDelFile": tn.FailDel,
			"holdAddFile": tn.HoldAdd, "logFile": tn.FailPlugLog,
		})
	}
	plugins = append(plugins, map[string]any{"type": "hostlease", "dataDir": tn.DataDir})
	b, err := json.MarshalIndent(map[string]any{"cniVersion": "1.1.0", "name": tn.Network, "plugins": plugins}, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

func (tn *testNet) touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("injected by "+t.Name()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (tn *testNet) remove(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// breakChain makes the failplugin fail ADD and DEL (containerd #12130's loop).
func (tn *testNet) breakChain(t *testing.T) { tn.touch(t, tn.FailAdd); tn.touch(t, tn.FailDel) }

// healChain removes every failplugin trigger.
func (tn *testNet) healChain(t *testing.T) { tn.remove(t, tn.FailAdd, tn.FailDel, tn.HoldAdd) }

// records lists the network's allocations through `hostlease-gc list -o json`.
func (tn *testNet) records(t *testing.T) []*allocator.Record {
	t.Helper()
	if _, err := os.Stat(store.FilePath(tn.DataDir, tn.Network)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := tn.gc("list", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", tn.DataDir, "--network", tn.Network)
	if err != nil {
		t.Fatal(err)
	}
	list, damaged, err := daemon.DecodeList(out)
	if err != nil || len(damaged) != 0 {
		t.Fatalf("hostlease-gc list -o json: %v, damaged %+v\n%s", err, damaged, out)
	}
	recs := make([]*allocator.Record, len(list))
	for i := range list {
		recs[i] = &list[i]
	}
	return recs
}

// held is the set of addresses the store holds, by container ID.
func (tn *testNet) held(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range tn.records(t) {
		out[r.ContainerID] = r.IP.String()
	}
	return out
}

// audit returns the network's audit entries (`hostlease-gc audit -o json`).
func (tn *testNet) audit(t *testing.T) []map[string]any {
	t.Helper()
	out, err := tn.gc("audit", "-o", "json", "--lock-timeout", harness.OracleLockWait, "--data-dir", tn.DataDir, "--network", tn.Network)
	if err != nil {
		t.Fatal(err)
	}
	var entries []map[string]any
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("hostlease-gc audit -o json: %v\n%s", err, out)
		}
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if m, ok := e.(map[string]any); ok {
					entries = append(entries, m)
				}
			}
		case map[string]any:
			entries = append(entries, x)
		}
	}
	return entries
}

func (tn *testNet) gc(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tn.n.gcBin(), args...)
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return out, errors.New(string(ee.Stderr))
	}
	return out, err
}

// cacheFiles lists libcni's result cache files of the network (CRI-O keeps
// its CNI cache in libcni's default dir, /var/lib/cni/results).
func (tn *testNet) cacheFiles() []string {
	m, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", tn.Network+"-*"))
	sort.Strings(m)
	return m
}

// failLog returns the failplugin's invocation log.
func (tn *testNet) failLog(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(tn.FailPlugLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// gcCalls returns the failplugin's log lines of GC calls, oldest first.
func (tn *testNet) gcCalls(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range tn.failLog(t) {
		if l["verb"] == "GC" {
			out = append(out, l)
		}
	}
	return out
}
