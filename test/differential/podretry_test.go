package differential

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Where hostlease differs from host-local, and why: an ADD for a pod
// (K8S_POD_UID) first releases the pod's other sandboxes whose netns the
// runtime has torn down, and an ADD on a full range set first releases every
// sandbox whose netns is torn down (docs/contracts.md, "Releases by the
// plugin at ADD"). host-local keeps those addresses forever (the runtime's
// DEL never came: a kubelet that lost the sandbox, a crash-loop). So the
// reference for hostlease is host-local *given the DELs the runtime failed to
// send*: for each hostlease ADD, the sandboxes it released (its audit log)
// are DELeted from host-local just before host-local's ADD. With those DELs,
// every outcome is the same byte for byte, and so are the reservations and
// the round-robin points. A third, untouched host-local runs the same
// sequence without them, to measure what host-local leaks.

// podRun is one run of the pod sequence over a small pool.
type podRun struct {
	t                  *testing.T
	c                  config
	hl, hlease, leaky  plugin
	r                  *rand.Rand
	next               int
	live               map[string][]string // pod -> its sandboxes whose netns exists
	dead               map[string][]string // pod -> its sandboxes whose netns is gone
	auditSeen          int
	injected, leakFail int
}

// netnsName is the netns (and sandbox) name: CNI_NETNS is
// /var/run/netns/<containerID> (plugin.run).
func (p *podRun) newSandbox(pod string) string {
	p.next++
	id := fmt.Sprintf("hldiff%d-%s-%d", os.Getpid(), pod, p.next)
	if out, err := exec.Command("ip", "netns", "add", id).CombinedOutput(); err != nil {
		p.t.Fatalf("ip netns add %s: %v: %s", id, err, out)
	}
	p.t.Cleanup(func() { p.tearDown(id) })
	return id
}

func (p *podRun) tearDown(id string) {
	if _, err := os.Lstat(filepath.Join("/var/run/netns", id)); err != nil {
		return
	}
	if out, err := exec.Command("ip", "netns", "del", id).CombinedOutput(); err != nil {
		p.t.Errorf("ip netns del %s: %v: %s", id, err, out)
	}
}

func podArgs(pod string) string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod + ";K8S_POD_UID=uid-" + pod
}

// pluginReleases returns the sandboxes hostlease's plugin released since
// the last call (its audit log).
func (p *podRun) pluginReleases() []allocator.AuditEvent {
	s, err := store.Open(store.FilePath(p.hlease.dataDir, p.c.name), store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		p.t.Fatal(err)
	}
	defer s.Close()
	var evs []allocator.AuditEvent
	if err := s.View(func(tx *store.Tx) error {
		var err error
		evs, err = tx.AuditLog(1 << 20)
		return err
	}); err != nil {
		p.t.Fatal(err)
	}
	var out []allocator.AuditEvent
	for _, ev := range evs[p.auditSeen:] {
		if allocator.IsPluginRelease(ev) {
			out = append(out, ev)
		}
	}
	p.auditSeen = len(evs)
	return out
}

// add runs the ADD of o: hostlease first, then host-local given a DEL of
// each sandbox hostlease released, and compares; the leaky host-local runs
// it as it is.
func (p *podRun) add(o op) outcome {
	p.t.Helper()
	b := p.hlease.run(p.t, p.c, o)
	for _, ev := range p.pluginReleases() {
		del := op{cmd: "DEL", containerID: ev.ContainerID, ifname: ev.IfName, why: "the runtime's missing DEL (" + ev.Reason + ")"}
		if out := p.hl.run(p.t, p.c, del); !out.ok {
			p.t.Fatalf("host-local %s: %s", del, out.raw)
		}
		p.injected++
	}
	a := p.hl.run(p.t, p.c, o)
	if a.ok != b.ok || a.raw != b.raw && (a.ok || normalizeMsg(a.msg) != normalizeMsg(b.msg)) {
		p.t.Fatalf("%s: host-local (given the missing DELs) and hostlease differ\nhost-local: %s\nhostlease:  %s", o, a.raw, b.raw)
	}
	if l := p.leaky.run(p.t, p.c, o); !l.ok && strings.Contains(l.msg, "no IP addresses available") {
		p.leakFail++
	}
	return b
}

// del runs a DEL the runtime does send, on all three.
func (p *podRun) del(o op) {
	p.t.Helper()
	for _, pl := range []plugin{p.hlease, p.hl, p.leaky} {
		if out := pl.run(p.t, p.c, o); !out.ok {
			p.t.Fatalf("%s %s: %s", pl.name, o, out.raw)
		}
	}
}

// step draws one event of a node whose pods crash-loop: a pod's sandbox
// dies without a DEL (its netns torn down), dies with a DEL, a pod starts a
// new sandbox (its old ones dead or, rarely, still live), a new pod starts.
func (p *podRun) step() {
	pods := slices.Sorted(func(yield func(string) bool) {
		for k := range p.live {
			if !yield(k) {
				return
			}
		}
	})
	pod := pods[p.r.IntN(len(pods))]
	switch n := p.r.IntN(10); {
	case n < 4 && len(p.live[pod]) > 0: // dies; the DEL never comes
		id := p.live[pod][0]
		p.tearDown(id)
		p.live[pod] = p.live[pod][1:]
		p.dead[pod] = append(p.dead[pod], id)
	case n < 5 && len(p.live[pod]) > 0: // dies; the runtime DELs it
		id := p.live[pod][0]
		p.tearDown(id)
		p.live[pod] = p.live[pod][1:]
		p.del(op{cmd: "DEL", containerID: id, ifname: "eth0", why: "sandbox removed"})
	default: // a new sandbox of the pod (or of a new pod)
		if n == 9 {
			pod = fmt.Sprintf("pod%d", len(pods))
		}
		id := p.newSandbox(pod)
		o := op{cmd: "ADD", containerID: id, ifname: "eth0", cniArgs: podArgs(pod), why: "sandbox of " + pod}
		if out := p.add(o); out.ok {
			p.live[pod] = append(p.live[pod], id)
		} else {
			p.tearDown(id)
		}
	}
}

// TestDifferentialPodRetries: pods crash-looping on a small pool, their
// sandboxes' netns real (ip netns add / del). hostlease equals host-local
// given the DELs the runtime never sent; the untouched host-local's leak is
// logged beside it.
func TestDifferentialPodRetries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
	seed := baseSeed(t)
	n := opsPerConfig()
	t.Logf("seed %d, %d ops (replay: HOSTLEASE_DIFF_SEED=%d)", seed, n, seed)
	hl, hlease := newPlugins(t)
	p := &podRun{t: t, c: config{name: "podretry", version: "1.0.0", sets: 1, ipam: `"ranges":[[{"subnet":"10.82.0.0/28"}]]`},
		hl: hl, hlease: hlease, leaky: plugin{"host-local", hl.bin, t.TempDir()},
		r: rand.New(rand.NewPCG(seed, 0x90d)), live: map[string][]string{"pod0": nil, "pod1": nil, "pod2": nil}, dead: map[string][]string{}}
	for i := range n {
		p.step()
		if i%25 == 24 {
			sameState(t, p.c, p.hl, p.hlease, i)
		}
	}
	sameState(t, p.c, p.hl, p.hlease, n)
	leaked, _ := hostLocalState(t, filepath.Join(p.leaky.dataDir, p.c.name))
	held, _ := hostLeaseState(t, p.hlease.dataDir, p.c.name, 1)
	live := 0
	for _, ids := range p.live {
		live += len(ids)
	}
	t.Logf("%d live sandboxes at the end: hostlease holds %d addresses, host-local without the DELs %d; hostlease released %d dead sandboxes at ADD; host-local without them failed %d ADDs for exhaustion",
		live, len(held), len(leaked), p.injected, p.leakFail)
	if p.injected == 0 {
		t.Errorf("the sequence never made hostlease release a dead sandbox: it proves nothing")
	}
	holders := map[string]bool{}
	for _, v := range held {
		holders[strings.SplitN(v, "\r\n", 2)[0]] = true
	}
	for pod, ids := range p.live {
		for _, id := range ids {
			if !holders[id] {
				t.Errorf("live sandbox %s of %s holds no address in hostlease", id, pod)
			}
		}
	}
	if len(held) > len(leaked) {
		t.Errorf("hostlease holds %d addresses, host-local without the DELs %d", len(held), len(leaked))
	}
}
