package faultinject

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A node of 100 running pods (kubelet's default is 110), each ADDed by a
// real plugin process, with its netns in place and its sandbox READY in the
// runtime. The daemon is then pointed at a runtime that is not that one.
type podsNode struct {
	*envNode
	ips map[string]netip.Addr
}

func newPodsNode(t *testing.T, pods int) *podsNode {
	t.Helper()
	p := &podsNode{envNode: newEnvNode(t), ips: map[string]netip.Addr{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	ids := make(chan string)
	for range 4 {
		wg.Go(func() {
			for id := range ids {
				o := p.call("ADD", id, nil)
				ip, err := resultIP(o.Stdout)
				if !o.OK() || err != nil {
					t.Errorf("ADD %s: %v %v", id, o, err)
					continue
				}
				p.n.cri.Ready(id, ip)
				mu.Lock()
				p.ips[id] = ip
				mu.Unlock()
			}
		})
	}
	for i := range pods {
		ids <- fmt.Sprintf("pod%03d-%s", i, strings.Repeat("e", 50))
	}
	close(ids)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return p
}

// stillHeld counts the pods that still hold their address.
func (p *podsNode) stillHeld() int {
	p.t.Helper()
	v, err := readView(filepath.Join(p.dataDir, network+".db"))
	if err != nil {
		p.t.Fatal(err)
	}
	n := 0
	for id, ip := range p.ips {
		if r := v.Records[ip]; r != nil && r.ContainerID == id {
			n++
		}
	}
	return n
}

// TestWrongRuntimeSocket: the daemon talks to a runtime that answers and lists
// none of the node's sandboxes (a wrong --cri-endpoint). Even with every
// wait turned off (--misses 1, --grace 0, --min-age 0), no live pod loses
// its address, over several sweeps, and the guard says why.
func TestWrongRuntimeSocket(t *testing.T) {
	p := newPodsNode(t, 100)
	wrong := startCRI(t) // answers, knows nothing
	res := daemonSweep(t, 3, "--cri-endpoint", wrong.Endpoint(), "--data-dir", p.dataDir, "--netns-dir", p.netns,
		"--interval", "1s", "--misses", "1", "--grace", "0s", "--min-age", "0s")
	if n := p.stillHeld(); n != len(p.ips) {
		t.Errorf("after 3 sweeps against a runtime listing none of the node's sandboxes, only %d of %d live pods hold their address\n%s",
			n, len(p.ips), strings.Join(res.Log, "\n"))
	}
	if v, _ := res.metric("hostlease_reclaim_guard_tripped_total", map[string]string{"network": network}); v < 1 {
		t.Errorf("the mass-reclaim guard did not report tripping (hostlease_reclaim_guard_tripped_total = %v)\n%s", v, strings.Join(res.Log, "\n"))
	}
}

// TestRebootReclaimsAtOnce: the node rebooted with a persistent data dir; the
// runtime lists none of the old sandboxes and their netns are gone (the
// netns dir is on a tmpfs). Every record predates the boot (read from
// --proc-dir's stat): all 100 are reclaimed by the first sweep, at the
// shipped policy (misses, grace, min-age, guard fraction all default).
func TestRebootReclaimsAtOnce(t *testing.T) {
	p := newPodsNode(t, 100)
	entries, err := os.ReadDir(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(p.netns, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	proc := t.TempDir()
	// The kernel's stat after a boot that happened after every ADD.
	btime := time.Now().Add(time.Second).Unix()
	if err := os.WriteFile(filepath.Join(proc, "stat"), fmt.Appendf(nil, "cpu  1 2 3 4\nbtime %d\nprocesses 1\n", btime), 0o644); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(time.Unix(btime, 0)) { // the boot is in the past before the daemon looks
		time.Sleep(10 * time.Millisecond)
	}
	rebooted := startCRI(t) // the runtime after the reboot: no old sandboxes
	res := daemonSweep(t, 1, "--cri-endpoint", rebooted.Endpoint(), "--data-dir", p.dataDir, "--netns-dir", p.netns,
		"--proc-dir", proc, "--interval", "30m")
	if n := p.stillHeld(); n != 0 {
		t.Errorf("after a reboot, the first sweep left %d of %d pre-boot records (want all reclaimed at once)\n%s", n, len(p.ips), strings.Join(res.Log, "\n"))
	}
}

// TestRunFlagsRejected: values that would turn the guard off or spin the
// daemon are refused at start with exit 2 naming the flag.
func TestRunFlagsRejected(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range [][]string{
		{"--max-reclaim-fraction", "NaN"},
		{"--max-reclaim-fraction", "+Inf"},
		{"--max-reclaim-fraction", "-0.5"},
		{"--max-reclaim-fraction", "0"},
		{"--max-reclaim-fraction", "1.5"},
		{"--interval", "1ns"},
		{"--interval", "0s"},
		{"--interval", "-30s"},
		{"--misses", "0"},
		{"--grace", "-1s"},
	} {
		args := append([]string{"run", "--cri-endpoint", "unix://" + filepath.Join(dir, "none.sock"), "--data-dir", dir, "--no-api", "--metrics-addr", ""}, tc...)
		res := runCLI(t, args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, tc[0]) {
			t.Errorf("%s %s: want exit 2 naming %s, got:\n%s", tc[0], tc[1], tc[0], res)
		}
	}
}
