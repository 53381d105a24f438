package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/leasecheck"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// The plugin heals at the source (docs/contracts.md, "Releases by the plugin
// at ADD"): these tests give it real network namespaces in the node's netns
// directory (`ip netns add`, deleted at cleanup) and tear them down as a
// runtime does, then judge every address with leasecheck: a holding the
// plugin may release is marked released just before the ADD that releases
// it; every other holding must still be held at the end.

// healNetnsDir is where `ip netns` (and containerd) keep named netns.
const healNetnsDir = "/var/run/netns"

// healNode is one network with a small pool 10.88.0.10 .. 10.88.0.(9+size).
type healNode struct {
	t       *testing.T
	dataDir string
	size    int
	book    *leasecheck.Book
	holds   map[string]*leasecheck.Holding // by sandbox
	netns   map[string]string              // sandbox -> netns path
}

func newHealNode(t *testing.T, size int) *healNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
	for _, tool := range []string{"ip", "unshare", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	return &healNode{t: t, dataDir: t.TempDir(), size: size, book: leasecheck.NewBook(),
		holds: map[string]*leasecheck.Holding{}, netns: map[string]string{}}
}

func (h *healNode) path() string { return store.FilePath(h.dataDir, "healnet") }

// conf is the plugin's stdin; ips are runtimeConfig.ips.
func (h *healNode) conf(ips ...string) []byte {
	c := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "healnet",
		"type":       "bridge",
		"ipam": map[string]any{
			"type":    "hostlease",
			"dataDir": h.dataDir,
			"ranges": [][]map[string]string{{{
				"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10",
				"rangeEnd": fmt.Sprintf("10.88.0.%d", 9+h.size), "gateway": "10.88.0.1",
			}}},
		},
	}
	if len(ips) > 0 {
		c["capabilities"] = map[string]bool{"ips": true}
		c["runtimeConfig"] = map[string]any{"ips": ips}
	}
	b, err := json.Marshal(c)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// sandboxNetns creates a real named netns for sandbox (as the runtime does
// before ADD) and returns its path; it is deleted at cleanup if still there.
func (h *healNode) sandboxNetns(sandbox string) string {
	h.t.Helper()
	name := fmt.Sprintf("hlheal-%d-%s-%s", os.Getpid(), sandbox, randHex(3))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		h.t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	path := filepath.Join(healNetnsDir, name)
	h.netns[sandbox] = path
	h.t.Cleanup(func() { h.tearDown(sandbox) })
	return path
}

// tearDown deletes sandbox's netns, as the runtime does when the sandbox
// dies.
func (h *healNode) tearDown(sandbox string) {
	path := h.netns[sandbox]
	if _, err := os.Lstat(path); err != nil {
		return
	}
	if out, err := exec.Command("ip", "netns", "del", filepath.Base(path)).CombinedOutput(); err != nil {
		h.t.Errorf("ip netns del %s: %v: %s", path, err, out)
	}
}

// pod is a pod's identity in CNI_ARGS.
type pod struct{ name, uid string }

// tryAdd runs ADD for sandbox of p with netns, extra CNI_ARGS and conf, and
// books the address it got.
func (h *healNode) tryAdd(p pod, sandbox, netns, extraArgs string, conf []byte) (netip.Addr, outcome) {
	h.t.Helper()
	args := podArgs("default", p.name, p.uid, sandbox) + extraArgs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hold := &leasecheck.Holding{Owner: sandbox, AddStart: time.Now()}
	o := runPlugin(ctx, call{Command: "ADD", ContainerID: sandbox, IfName: "eth0", Netns: netns, Args: args}, conf)
	hold.AddDone = time.Now()
	if !o.OK() {
		return netip.Addr{}, o
	}
	ips, err := resultIPs(o.Stdout)
	if err != nil || len(ips) != 1 {
		h.t.Fatalf("ADD %s: result %v, %v", sandbox, ips, err)
	}
	h.book.Hold(hold, ips[0].Addr())
	h.holds[sandbox] = hold
	return ips[0].Addr(), o
}

// add is tryAdd of a sandbox with a fresh real netns, which must succeed.
func (h *healNode) add(p pod, sandbox string) netip.Addr {
	h.t.Helper()
	ip, o := h.tryAdd(p, sandbox, h.sandboxNetns(sandbox), "", h.conf())
	if !o.OK() {
		h.t.Fatalf("ADD %s (pod %s): %s", sandbox, p.uid, o)
	}
	return ip
}

// dies tears sandbox's netns down and books its holding as released from
// now: the next ADD may release it.
func (h *healNode) dies(sandbox string) {
	h.tearDown(sandbox)
	if hold := h.holds[sandbox]; hold != nil {
		h.book.Releasing(hold)
	}
}

// held returns the store's records by sandbox.
func (h *healNode) held() map[string]*allocator.Record {
	snap := readStore(h.t, h.path())
	checkIntegrity(h.t, snap)
	out := map[string]*allocator.Record{}
	for _, r := range snap.Records {
		out[r.ContainerID] = r
	}
	return out
}

// pluginReleases returns the audit log's plugin releases as "reason sandbox".
func (h *healNode) pluginReleases() []string {
	var out []string
	for _, ev := range readStore(h.t, h.path()).Audit {
		if allocator.IsPluginRelease(ev) {
			out = append(out, ev.Reason+" "+ev.ContainerID)
		}
	}
	return out
}

// judge fails on any address leasecheck finds held twice at once, or any
// holding never released that the store no longer holds for its sandbox.
func (h *healNode) judge() {
	h.t.Helper()
	for _, d := range h.book.Duplicates() {
		h.t.Errorf("address %s held at once by %s and %s", d.IP, d.A.Owner, d.B.Owner)
	}
	recs := h.held()
	for _, l := range h.book.Lost(func(ip netip.Addr, owner string) bool {
		r := recs[owner]
		return r != nil && r.IP == ip
	}) {
		h.t.Errorf("address %s of live sandbox %s was released", l.IP, l.H.Owner)
	}
}

// A pod in a retry loop (each sandbox's netns torn down before the next
// ADD, as kubelet and the runtime do for a crash-looping sandbox) holds one
// address at every step, and each next address is host-local's (round robin
// on: .10, .11, ... wrapping), with one audited release per retry.
func TestHealPodRetryLoop(t *testing.T) {
	h := newHealNode(t, 4)
	p := pod{"crashy", "uid-crashy"}
	const n = 9
	var want []string
	for i := range n {
		sb := fmt.Sprintf("retry%d", i)
		if i > 0 {
			h.dies(fmt.Sprintf("retry%d", i-1))
			want = append(want, allocator.ReasonPodSandboxReplaced+" "+fmt.Sprintf("retry%d", i-1))
		}
		ip := h.add(p, sb)
		if exp := fmt.Sprintf("10.88.0.%d", 10+i%4); ip.String() != exp {
			t.Errorf("retry %d got %s, want host-local's next address %s", i, ip, exp)
		}
		if recs := h.held(); len(recs) != 1 || recs[sb] == nil {
			t.Fatalf("retry %d: the store holds %d records (%v), want only %s's", i, len(recs), slices.Collect(maps.Keys(recs)), sb)
		}
	}
	if got := h.pluginReleases(); !slices.Equal(got, want) {
		t.Errorf("plugin releases in the audit log:\n got %v\nwant %v", got, want)
	}
	h.judge()
}

// A pod is its UID, not its name: a recreated pod with the same name (a
// StatefulSet's pod-0) does not release the old pod's record at ADD, even
// with the old netns gone (the daemon's rules apply, or a full pool).
func TestHealOnlySamePodUID(t *testing.T) {
	h := newHealNode(t, 4)
	h.add(pod{"web-0", "uid-old"}, "old")
	h.dies("old")
	h.add(pod{"web-0", "uid-new"}, "new")
	if recs := h.held(); len(recs) != 2 || recs["old"] == nil {
		t.Fatalf("the old pod's record was released by a pod of the same name: %d records", len(recs))
	}
	if got := h.pluginReleases(); len(got) != 0 {
		t.Errorf("plugin releases %v, want none", got)
	}
	// Not released, so still booked as held.
	h.holds["old"].DelStart = time.Time{}
	h.judge()
}

// A live sandbox (its netns present) is never released: not another sandbox
// of the same pod, not another pod's on a full pool, where the ADD fails as
// host-local's does. Once one netns is torn down, the full pool's ADD frees
// that one record and succeeds with its address.
func TestHealNeverLiveAndFullPool(t *testing.T) {
	h := newHealNode(t, 3)
	p := pod{"twin", "uid-twin"}
	h.add(p, "twinA")
	h.add(p, "twinB") // the same pod, both live
	c := h.add(pod{"other", "uid-other"}, "otherC")
	if recs := h.held(); len(recs) != 3 {
		t.Fatalf("%d records, want 3 (a live sandbox of the same pod was released)", len(recs))
	}
	_, o := h.tryAdd(pod{"late", "uid-late"}, "lateD", h.sandboxNetns("lateD"), "", h.conf())
	if o.Err == nil || o.Err.Code != allocator.ErrRangeExhausted {
		t.Fatalf("ADD on a full pool of live sandboxes: %s, want CNI error %d", o, allocator.ErrRangeExhausted)
	}
	if recs := h.held(); len(recs) != 3 {
		t.Fatalf("a full pool's failed ADD released a live record: %d records", len(recs))
	}
	h.dies("otherC")
	ip, o := h.tryAdd(pod{"late", "uid-late"}, "lateD", h.netns["lateD"], "", h.conf())
	if !o.OK() || ip != c {
		t.Fatalf("ADD on a full pool with one dead record: %s %s, want %s", ip, o, c)
	}
	if got, want := h.pluginReleases(), []string{allocator.ReasonNetnsGoneAtExhaustion + " otherC"}; !slices.Equal(got, want) {
		t.Errorf("plugin releases %v, want %v", got, want)
	}
	h.judge()
}

// A full pool whose only dead records are doubtful is not healed: a netns
// that never existed at ADD (a made-up path), a /proc/<pid>/ns/net path of a
// process gone since, a netns outside the ADD's netns directory, a record
// without a witness (an older plugin's). The ADD fails as today.
func TestHealDoubtfulDeadOnFullPool(t *testing.T) {
	h := newHealNode(t, 4)
	// Never existed: a path in the netns dir that is not there at ADD.
	if _, o := h.tryAdd(pod{"a", "uid-a"}, "neverA", filepath.Join(healNetnsDir, "hlheal-missing-"+randHex(4)), "", h.conf()); !o.OK() {
		t.Fatalf("ADD with a made-up netns: %s", o)
	}
	// A /proc path of a process (in its own netns) that exits.
	sleep := exec.Command("unshare", "--net", "sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	procNs := fmt.Sprintf("/proc/%d/ns/net", sleep.Process.Pid)
	if _, o := h.tryAdd(pod{"b", "uid-b"}, "procB", procNs, "", h.conf()); !o.OK() {
		t.Fatalf("ADD with a /proc netns: %s", o)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	// Outside the netns dir: a file in another directory, removed.
	other := filepath.Join(t.TempDir(), "netns-c")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, o := h.tryAdd(pod{"c", "uid-c"}, "elsewhereC", other, "", h.conf()); !o.OK() {
		t.Fatalf("ADD with a netns elsewhere: %s", o)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	// No witness: a real netns torn down, its record rewritten as an older
	// plugin wrote it.
	h.add(pod{"d", "uid-d"}, "oldD")
	h.tearDown("oldD")
	s, err := store.Open(h.path(), store.OpenOptions{LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx *store.Tx) error {
		recs, err := tx.Records(allocator.Query{Attachment: &allocator.Attachment{ContainerID: "oldD", IfName: "eth0"}})
		if err != nil || len(recs) != 1 {
			return fmt.Errorf("oldD's record: %v %v", recs, err)
		}
		recs[0].NetnsWitness = allocator.NetnsWitness{}
		return tx.Put(recs[0])
	})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []pod{{"a", "uid-a"}, {"e", "uid-e"}} { // same pod as a doubtful record, and another
		_, o := h.tryAdd(p, "live-"+p.uid, h.sandboxNetns("live-"+p.uid), "", h.conf())
		if o.Err == nil || o.Err.Code != allocator.ErrRangeExhausted {
			t.Errorf("ADD for pod %s on a full pool of doubtful dead records: %s, want CNI error %d", p.uid, o, allocator.ErrRangeExhausted)
		}
	}
	if recs := h.held(); len(recs) != 4 {
		t.Errorf("%d records, want the 4 doubtful ones kept", len(recs))
	}
	if got := h.pluginReleases(); len(got) != 0 {
		t.Errorf("plugin releases %v, want none", got)
	}
	h.judge()
}

// A store shared by two mount namespaces that see different trees at the
// netns directory (one runtime in a private mount namespace with its own
// tmpfs there) never has one view's records released by the other's ADD:
// the netns directory's device and inode differ, whatever the paths say.
func TestHealOtherMountView(t *testing.T) {
	h := newHealNode(t, 3)
	p := pod{"shared", "uid-shared"}
	// Host view: sandbox A of the pod; its netns torn down on the host.
	h.add(p, "hostA")
	h.tearDown("hostA")
	// Private view: sandboxes of the same pod and of another, ADDed in a
	// mount namespace with a tmpfs over the netns dir (their netns exist
	// there only, and vanish with it).
	inView := func(sandbox string, q pod) outcome {
		name := "hlheal-view-" + sandbox + "-" + randHex(3)
		netns := filepath.Join(healNetnsDir, name)
		script := `mount -t tmpfs hostlease-view "$0" && ip netns add "$1" && exec "$2"`
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-ec", script, healNetnsDir, name, hostleaseBin())
		c := call{Command: "ADD", ContainerID: sandbox, IfName: "eth0", Netns: netns, Args: podArgs("default", q.name, q.uid, sandbox)}
		cmd.Env = c.env()
		cmd.Stdin = strings.NewReader(string(h.conf()))
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		hold := &leasecheck.Holding{Owner: sandbox, AddStart: time.Now()}
		err := cmd.Run()
		hold.AddDone = time.Now()
		o := cniexec.Classify(err, []byte(stdout.String()), []byte(stderr.String()), 0)
		if o.OK() {
			if ips, err := resultIPs(o.Stdout); err == nil && len(ips) == 1 {
				h.book.Hold(hold, ips[0].Addr())
			}
		}
		return o
	}
	if o := inView("viewB", p); !o.OK() {
		t.Fatalf("ADD in the private view: %s", o)
	}
	if o := inView("viewC", pod{"viewpod", "uid-view"}); !o.OK() {
		t.Fatalf("ADD in the private view: %s", o)
	}
	// The host's A, dead in the host view, was not judged from the other
	// view by its pod's next sandbox there.
	recs := h.held()
	if len(recs) != 3 {
		t.Fatalf("%d records after the private view's ADDs, want 3 (hostA judged from another view)", len(recs))
	}
	// The private view's records (their netns absent from the host's tree)
	// are not judged from the host's, not by a retry of their pod, not on
	// a full pool: the host's full-pool ADD frees only hostA, dead in its
	// own view.
	h.book.Releasing(h.holds["hostA"])
	ip, o := h.tryAdd(pod{"viewpod", "uid-view"}, "hostD", h.sandboxNetns("hostD"), "", h.conf())
	if !o.OK() || ip != recs["hostA"].IP {
		t.Fatalf("host ADD on a full pool: %s %s, want hostA's %s", ip, o, recs["hostA"].IP)
	}
	if recs := h.held(); len(recs) != 3 || recs["viewB"] == nil || recs["viewC"] == nil {
		t.Fatalf("records %v: the host released the other view's records", slices.Collect(maps.Keys(recs)))
	}
	if got, want := h.pluginReleases(), []string{allocator.ReasonNetnsGoneAtExhaustion + " hostA"}; !slices.Equal(got, want) {
		t.Errorf("plugin releases %v, want %v", got, want)
	}
	h.judge()
}

// A dead sandbox's requested address (CNI_ARGS IP=, runtimeConfig.ips) is
// its pod's again: another pod asking for it is refused while the record
// stands; the pod's next sandbox asking for it gets it.
func TestHealRequestedIP(t *testing.T) {
	h := newHealNode(t, 6)
	p := pod{"fixed", "uid-fixed"}
	want := netip.MustParseAddr("10.88.0.12")
	if ip, o := h.tryAdd(p, "fixedA", h.sandboxNetns("fixedA"), ";IP=10.88.0.12", h.conf()); !o.OK() || ip != want {
		t.Fatalf("ADD with IP=: %s %s", ip, o)
	}
	h.dies("fixedA")
	h.holds["fixedA"].DelStart = time.Time{} // another pod's ADD must not free it
	if _, o := h.tryAdd(pod{"thief", "uid-thief"}, "thief", h.sandboxNetns("thief"), ";IP=10.88.0.12", h.conf()); o.Err == nil || o.Err.Code != allocator.ErrAddressUnavailable {
		t.Fatalf("another pod asking for the dead sandbox's address: %s, want CNI error %d", o, allocator.ErrAddressUnavailable)
	}
	h.book.Releasing(h.holds["fixedA"])
	if ip, o := h.tryAdd(p, "fixedB", h.sandboxNetns("fixedB"), ";IP=10.88.0.12", h.conf()); !o.OK() || ip != want {
		t.Fatalf("the pod's next sandbox asking for its address (IP=): %s %s", ip, o)
	}
	h.dies("fixedB")
	if ip, o := h.tryAdd(p, "fixedC", h.sandboxNetns("fixedC"), "", h.conf("10.88.0.12/24")); !o.OK() || ip != want {
		t.Fatalf("the pod's next sandbox asking for its address (runtimeConfig.ips): %s %s", ip, o)
	}
	want2 := []string{allocator.ReasonPodSandboxReplaced + " fixedA", allocator.ReasonPodSandboxReplaced + " fixedB"}
	if got := h.pluginReleases(); !slices.Equal(got, want2) {
		t.Errorf("plugin releases %v, want %v", got, want2)
	}
	h.judge()
}
