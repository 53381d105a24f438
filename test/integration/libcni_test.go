package integration

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// requireRoot skips tests that need network namespaces and interfaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates network namespaces, runs the bridge plugin)")
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// netnsFixture is a named network namespace (ip netns add), deleted with
// everything in it (veths, bridges) when the test ends, pass or fail.
type netnsFixture struct {
	name, path string
}

func newNetns(t *testing.T, role string) netnsFixture {
	t.Helper()
	name := fmt.Sprintf("hlit-%s-%s", role, randHex(4))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return netnsFixture{name: name, path: "/var/run/netns/" + name}
}

// ipIn runs `ip -n NS args...`.
func (n netnsFixture) ip(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"-n", n.name}, args...)...).CombinedOutput()
	return string(out), err
}

// cniRig runs libcni with the test's bin dir and cache dir from inside a
// private "host" network namespace, so the bridge, its gateway address and the
// sysctls isGateway sets never touch the real host. Plugins inherit the netns
// of the (locked) thread that execs them.
type cniRig struct {
	t    *testing.T
	host ns.NetNS
	cni  *libcni.CNIConfig
	ctx  context.Context
}

func newCNIRig(t *testing.T) *cniRig {
	t.Helper()
	host := newNetns(t, "host")
	h, err := ns.GetNS(host.path)
	if err != nil {
		t.Fatalf("opening %s: %v", host.path, err)
	}
	t.Cleanup(func() { h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &cniRig{t: t, host: h, ctx: ctx,
		cni: libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)}
}

// in runs fn with the calling thread in the rig's host namespace.
func (r *cniRig) in(fn func() error) error {
	return r.host.Do(func(ns.NetNS) error { return fn() })
}

func (r *cniRig) add(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (*types100.Result, error) {
	var res types.Result
	err := r.in(func() (err error) {
		res, err = r.cni.AddNetworkList(r.ctx, list, rt)
		return err
	})
	if err != nil {
		return nil, err
	}
	return types100.NewResultFromResult(res)
}

func (r *cniRig) check(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return r.in(func() error { return r.cni.CheckNetworkList(r.ctx, list, rt) })
}

func (r *cniRig) del(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return r.in(func() error { return r.cni.DelNetworkList(r.ctx, list, rt) })
}

func (r *cniRig) gc(list *libcni.NetworkConfigList, valid ...*libcni.RuntimeConf) error {
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	for _, rt := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: rt.ContainerID, IfName: rt.IfName})
	}
	return r.in(func() error { return r.cni.GCNetworkList(r.ctx, list, args) })
}

func (r *cniRig) status(list *libcni.NetworkConfigList) error {
	return r.in(func() error { return r.cni.GetStatusNetworkList(r.ctx, list) })
}

// bridgePlugin is a bridge entry with hostlease IPAM on one subnet.
func bridgePlugin(bridge, dataDir, subnet string, ipamExtra map[string]any) map[string]any {
	ipam := map[string]any{
		"type":    "hostlease",
		"dataDir": dataDir,
		"ranges":  [][]map[string]string{{{"subnet": subnet}}},
	}
	for k, v := range ipamExtra {
		ipam[k] = v
	}
	return map[string]any{"type": "bridge", "bridge": bridge, "isGateway": true, "ipam": ipam}
}

// conflist builds a cniVersion 1.1.0 network list.
func conflist(t *testing.T, name string, plugins ...map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	b, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": name, "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("ConfListFromBytes(%s): %v", b, err)
	}
	return list
}

// podRT is the runtime's view of one pod sandbox attachment, with the CNI_ARGS
// containerd passes.
func podRT(id, netnsPath, ifname, podName string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id, NetNS: netnsPath, IfName: ifname,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "team-a"},
			{"K8S_POD_NAME", podName},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", "uid-" + podName},
		},
	}
}

// recordsOf returns the store's records of one attachment (nil when the store
// does not exist).
func recordsOf(t *testing.T, path, id, ifname string) []*allocator.Record {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return byOwner(t, path, []string{id}, ifname)[id]
}

// cniCode returns the CNI error code carried by err, or 0.
func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// TestLibcniBridgeChain drives hostlease the way containerd and CRI-O do:
// libcni runs the conflist [bridge(ipam: hostlease), hostlease (commit marker)]
// at cniVersion 1.1.0 against a real network namespace. It guarantees:
//   - ADD gives the namespace's eth0 the address hostlease reserved, and the
//     store record is committed (the marker ran) with the pod namespace, name
//     and UID from CNI_ARGS, the netns path and the network name;
//   - CHECK and STATUS succeed; DEL frees the address and removes the
//     interface; a second DEL succeeds too (idempotent);
//   - GC with valid attachments [A] keeps A and frees every other attachment:
//     one libcni has cached (libcni DELs it through the chain) and one it has
//     never seen, which only hostlease's GC verb can free: bridge v1.9.1 does
//     not forward GC to its IPAM, so the commit marker entry collects;
//   - with "failStatusOnExhaustion": true, STATUS fails with code 50 once a
//     tiny pool is full (bridge v1.9.1 delegates STATUS to its IPAM), ADD then
//     fails with code 100, STATUS is fine again after a DEL; by default
//     (the option unset) STATUS stays quiet on a full pool.
func TestLibcniBridgeChain(t *testing.T) {
	requireRoot(t)
	rig := newCNIRig(t)
	pod := newNetns(t, "pod")
	dataDir := t.TempDir()
	network := "hlit-" + randHex(3)
	bridge := "hlbr" + randHex(3)
	path := store.FilePath(dataDir, network)
	list := conflist(t, network,
		bridgePlugin(bridge, dataDir, "10.77.0.0/24", nil),
		map[string]any{"type": "hostlease", "dataDir": dataDir})

	if err := rig.status(list); err != nil {
		t.Errorf("STATUS before any ADD (no store yet): %v", err)
	}

	// ADD: the namespace gets the reserved address, committed by the marker.
	a := podRT("sandbox-a-"+randHex(8), pod.path, "eth0", "web-0")
	res, err := rig.add(list, a)
	if err != nil {
		t.Fatalf("AddNetworkList: %v", err)
	}
	if len(res.IPs) != 1 {
		t.Fatalf("ADD result has %d addresses: %+v", len(res.IPs), res)
	}
	addr, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	addr = addr.Unmap()
	if !netip.MustParsePrefix("10.77.0.0/24").Contains(addr) || res.IPs[0].Gateway.String() != "10.77.0.1" {
		t.Errorf("ADD result %s gw %s: want an address of 10.77.0.0/24 via 10.77.0.1", res.IPs[0].Address.String(), res.IPs[0].Gateway)
	}
	if out, err := pod.ip("-4", "-o", "addr", "show", "dev", "eth0"); err != nil || !strings.Contains(out, addr.String()+"/24") {
		t.Errorf("eth0 in %s: want %s/24, got %q (%v)", pod.name, addr, out, err)
	}
	recs := recordsOf(t, path, a.ContainerID, "eth0")
	if len(recs) != 1 {
		t.Fatalf("store has %d records for %s", len(recs), a.ContainerID)
	}
	r := recs[0]
	if r.IP != addr || r.State != allocator.StateCommitted || r.Committed.IsZero() {
		t.Errorf("record %s state %q committed %v: want %s committed by the marker", r.IP, r.State, r.Committed, addr)
	}
	if r.PodNamespace != "team-a" || r.PodName != "web-0" || r.PodUID != "uid-web-0" || r.Netns != pod.path || r.Network != network || r.IfName != "eth0" {
		t.Errorf("record owner fields: %+v", r)
	}

	if err := rig.check(list, a); err != nil {
		t.Errorf("CheckNetworkList: %v", err)
	}
	if err := rig.status(list); err != nil {
		t.Errorf("GetStatusNetworkList with free addresses: %v", err)
	}

	// DEL frees it; DEL again is fine.
	if err := rig.del(list, a); err != nil {
		t.Fatalf("DelNetworkList: %v", err)
	}
	if snap := readStore(t, path); len(snap.Records) != 0 || len(snap.Owners) != 0 {
		t.Errorf("after DEL the store holds %d records, %d index entries", len(snap.Records), len(snap.Owners))
	}
	if out, err := pod.ip("link", "show", "dev", "eth0"); err == nil {
		t.Errorf("eth0 still exists in %s after DEL: %s", pod.name, out)
	}
	if err := rig.del(list, a); err != nil {
		t.Errorf("second DelNetworkList: %v", err)
	}

	// GC: A is valid; B is cached by libcni but not valid; C was reserved by
	// hostlease outside libcni (as an ADD whose chain died before libcni
	// cached anything), so only a hostlease GC can free it.
	a = podRT("sandbox-a2-"+randHex(8), pod.path, "eth0", "web-0")
	b := podRT("sandbox-b-"+randHex(8), pod.path, "eth1", "web-1")
	for _, rt := range []*libcni.RuntimeConf{a, b} {
		if _, err := rig.add(list, rt); err != nil {
			t.Fatalf("AddNetworkList %s: %v", rt.ContainerID, err)
		}
	}
	cID := "sandbox-c-" + randHex(8)
	ipamStdin := pluginBytesWithName(t, list.Plugins[0].Bytes, network)
	if o := runPlugin(rig.ctx, call{Command: "ADD", ContainerID: cID, IfName: "eth0", Netns: pod.path,
		Args: podArgs("team-a", "web-2", "uid-web-2", cID)}, ipamStdin); !o.OK() {
		t.Fatalf("direct hostlease ADD for %s: %v", cID, o)
	}
	if err := rig.gc(list, a); err != nil {
		t.Errorf("GCNetworkList: %v", err)
	}
	if n := len(recordsOf(t, path, a.ContainerID, "eth0")); n != 1 {
		t.Errorf("GC: valid attachment %s has %d records, want 1", a.ContainerID, n)
	}
	if n := len(recordsOf(t, path, b.ContainerID, "eth1")); n != 0 {
		t.Errorf("GC: cached, not valid attachment %s still has %d records", b.ContainerID, n)
	}
	if n := len(recordsOf(t, path, cID, "eth0")); n != 0 {
		t.Errorf("GC: attachment %s unknown to libcni and not valid still holds %d records "+
			"(bridge v1.9.1 does not forward GC to its IPAM: the hostlease commit marker entry must collect)", cID, n)
	}
	checkIntegrity(t, readStore(t, path))
	if err := rig.del(list, a); err != nil {
		t.Errorf("DelNetworkList %s: %v", a.ContainerID, err)
	}

	t.Run("status-exhausted", func(t *testing.T) {
		tinyDir := t.TempDir()
		tinyNet := "hlit-tiny-" + randHex(3)
		// 10.78.0.0/30: .1 is the gateway, .2 the only allocatable address.
		tiny := conflist(t, tinyNet,
			bridgePlugin("hlbr"+randHex(3), tinyDir, "10.78.0.0/30", map[string]any{"failStatusOnExhaustion": true}),
			map[string]any{"type": "hostlease", "dataDir": tinyDir})
		quiet := conflist(t, tinyNet,
			bridgePlugin("hlbr"+randHex(3), tinyDir, "10.78.0.0/30", nil),
			map[string]any{"type": "hostlease", "dataDir": tinyDir})
		p1 := podRT("sandbox-t1-"+randHex(8), pod.path, "eth5", "tiny-1")
		p2 := podRT("sandbox-t2-"+randHex(8), pod.path, "eth6", "tiny-2")
		if err := rig.status(tiny); err != nil {
			t.Errorf("STATUS on an empty pool: %v", err)
		}
		res, err := rig.add(tiny, p1)
		if err != nil {
			t.Fatalf("AddNetworkList: %v", err)
		}
		if got := res.IPs[0].Address.String(); got != "10.78.0.2/30" {
			t.Errorf("ADD on the /30 gave %s, want 10.78.0.2/30", got)
		}
		err = rig.status(tiny)
		if cniCode(err) != allocator.ErrStatusUnavailable {
			t.Errorf("STATUS on a full pool: got %v (code %d), want CNI error 50", err, cniCode(err))
		} else {
			t.Logf("STATUS on a full pool (through bridge): %v", err)
		}
		if err := rig.status(quiet); err != nil {
			t.Errorf("STATUS with failStatusOnExhaustion unset (default off) on a full pool: %v", err)
		}
		_, err = rig.add(tiny, p2)
		if cniCode(err) != allocator.ErrRangeExhausted || !strings.Contains(err.Error(), "no IP addresses available in range set") {
			t.Errorf("ADD on a full pool: got %v (code %d), want CNI error 100 naming the range set", err, cniCode(err))
		}
		if err := rig.del(tiny, p2); err != nil {
			t.Errorf("DelNetworkList after the failed ADD: %v", err)
		}
		if err := rig.del(tiny, p1); err != nil {
			t.Fatalf("DelNetworkList: %v", err)
		}
		if err := rig.status(tiny); err != nil {
			t.Errorf("STATUS after the pool was freed: %v", err)
		}
	})
}

// pluginBytesWithName is a conflist entry as libcni hands it to the plugin
// (with the list's name and cniVersion injected): what bridge passes its IPAM.
func pluginBytesWithName(t *testing.T, entry []byte, network string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(entry, &m); err != nil {
		t.Fatal(err)
	}
	m["name"], m["cniVersion"] = network, "1.1.0"
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLibcniFailingChain is the leak the project exists for: the conflist
// [bridge(ipam: hostlease), failplugin] where the second plugin fails. It
// guarantees, with libcni's real behaviour:
//   - a failed ADD leaves the reservation pending, with the pod fields and the
//     netns path (what hostlease-gc needs to judge it);
//   - DEL runs the chain in reverse and stops at the first error: while the
//     failplugin's DEL fails, bridge (and so hostlease) never gets DEL, the
//     record stays pending and the veth stays in the pod;
//   - once the failure is gone, DEL succeeds and the store is empty.
func TestLibcniFailingChain(t *testing.T) {
	requireRoot(t)
	rig := newCNIRig(t)
	pod := newNetns(t, "pod")
	dataDir := t.TempDir()
	network := "hlit-fail-" + randHex(3)
	failAdd := filepath.Join(t.TempDir(), "fail-add")
	failDel := filepath.Join(t.TempDir(), "fail-del")
	path := store.FilePath(dataDir, network)
	list := conflist(t, network,
		bridgePlugin("hlbr"+randHex(3), dataDir, "10.79.0.0/24", nil),
		map[string]any{"type": "failplugin", "failAddFile": failAdd, "failDelFile": failDel})
	touch := func(p string) {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt := podRT("sandbox-f-"+randHex(8), pod.path, "eth0", "leaky-0")

	touch(failAdd)
	_, err := rig.add(list, rt)
	if err == nil || !strings.Contains(err.Error(), "failplugin") {
		t.Fatalf("AddNetworkList with failAddFile: got %v, want the failplugin's error", err)
	}
	t.Logf("ADD: %v", err)
	recs := recordsOf(t, path, rt.ContainerID, "eth0")
	if len(recs) != 1 {
		t.Fatalf("after the failed chain ADD the store has %d records for %s, want 1 pending", len(recs), rt.ContainerID)
	}
	r := recs[0]
	if r.State != allocator.StatePending || r.PodNamespace != "team-a" || r.PodName != "leaky-0" || r.PodUID != "uid-leaky-0" || r.Netns != pod.path {
		t.Errorf("record after failed ADD: %+v; want pending with pod fields and netns %s", r, pod.path)
	}

	touch(failDel)
	err = rig.del(list, rt)
	if err == nil || !strings.Contains(err.Error(), "failplugin") {
		t.Fatalf("DelNetworkList with failDelFile: got %v, want the failplugin's error", err)
	}
	t.Logf("DEL: %v", err)
	recs = recordsOf(t, path, rt.ContainerID, "eth0")
	if len(recs) != 1 || recs[0].IP != r.IP || recs[0].State != allocator.StatePending {
		t.Errorf("after the failed DEL: %v; want the same pending record (libcni stops at the failplugin, bridge never gets DEL)", recs)
	}
	if _, err := pod.ip("link", "show", "dev", "eth0"); err != nil {
		t.Errorf("eth0 is gone from %s although bridge DEL should not have run: %v", pod.name, err)
	}

	if err := os.Remove(failDel); err != nil {
		t.Fatal(err)
	}
	if err := rig.del(list, rt); err != nil {
		t.Fatalf("DelNetworkList after removing failDelFile: %v", err)
	}
	if snap := readStore(t, path); len(snap.Records) != 0 || len(snap.Owners) != 0 {
		t.Errorf("after DEL the store holds %d records, %d index entries", len(snap.Records), len(snap.Owners))
	}
	if out, err := pod.ip("link", "show", "dev", "eth0"); err == nil {
		t.Errorf("eth0 still exists in %s after DEL: %s", pod.name, out)
	}
}

// TestDelMissingState guarantees that DEL never fails for missing or broken
// state and keeps the evidence, and that ADD refuses a broken store:
//   - DEL of an unknown container, and DEL with a dataDir that does not exist,
//     exit 0 (and create nothing);
//   - with the store truncated to 0 bytes, truncated to half its size (a small
//     store whose live pages all survive, and a larger one that loses some),
//     or overwritten with garbage: DEL exits 0 and leaves the file byte for
//     byte as it was; ADD fails with CNI error 11 saying the store is
//     unreadable and leaves it as it was too; STATUS reports 50.
func TestDelMissingState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	network := "hlit-broken"
	mk := func(cmd, id string) call {
		return call{Command: cmd, ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id,
			Args: podArgs("ns", "pod-"+id, "uid-"+id, id)}
	}
	// A healthy store to break, with n containers.
	healthy := func(t *testing.T, n int) (dir, path string, conf []byte) {
		dir = t.TempDir()
		conf = ipamConf(t, network, dir, "10.80.0.0/16")
		for i := range n {
			if o := runPlugin(ctx, mk("ADD", fmt.Sprintf("c%03d", i)), conf); !o.OK() {
				t.Fatalf("ADD: %v", o)
			}
		}
		return dir, store.FilePath(dir, network), conf
	}

	t.Run("unknown-container", func(t *testing.T) {
		_, path, conf := healthy(t, 3)
		if o := runPlugin(ctx, mk("DEL", "nobody"), conf); !o.OK() {
			t.Errorf("DEL of an unknown container: %v", o)
		}
		if snap := readStore(t, path); len(snap.Records) != 3 {
			t.Errorf("DEL of an unknown container changed the store: %d records, want 3", len(snap.Records))
		}
	})
	t.Run("missing-datadir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "never", "created")
		if o := runPlugin(ctx, mk("DEL", "c000"), ipamConf(t, network, dir, "10.80.0.0/16")); !o.OK() {
			t.Errorf("DEL with a missing dataDir: %v", o)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("DEL created the dataDir %s (%v)", dir, err)
		}
	})

	breakages := []struct {
		name    string
		records int
		damage  func(path string) error
	}{
		{"truncated-to-0", 3, func(p string) error { return os.Truncate(p, 0) }},
		{"truncated-to-half", 3, truncateHalf},
		{"truncated-to-half-large", 150, truncateHalf},
		{"garbage", 3, func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			junk := make([]byte, fi.Size())
			_, _ = rand.Read(junk)
			return os.WriteFile(p, junk, 0o600)
		}},
	}
	for _, bk := range breakages {
		t.Run(bk.name, func(t *testing.T) {
			_, path, conf := healthy(t, bk.records)
			if err := bk.damage(path); err != nil {
				t.Fatal(err)
			}
			want := fileDigest(t, path)
			if o := runPlugin(ctx, mk("DEL", "c001"), conf); !o.OK() {
				t.Errorf("DEL on a %s store: %v", bk.name, o)
			}
			if got := fileDigest(t, path); got != want {
				t.Errorf("DEL changed the %s store (evidence): %s, was %s", bk.name, got, want)
			}
			o := runPlugin(ctx, mk("ADD", "new-one"), conf)
			if o.Err == nil || o.Err.Code != 11 || !strings.Contains(o.Err.Msg, "unreadable") {
				t.Errorf("ADD on a %s store: %v; want CNI error 11 saying the store is unreadable", bk.name, o)
			} else {
				t.Logf("ADD: %d %s", o.Err.Code, o.Err.Msg)
			}
			if got := fileDigest(t, path); got != want {
				t.Errorf("ADD changed the %s store (evidence): %s, was %s", bk.name, got, want)
			}
			if o := runPlugin(ctx, mk("STATUS", ""), conf); o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable {
				t.Errorf("STATUS on a %s store: %v; want CNI error 50", bk.name, o)
			}
		})
	}
}

func truncateHalf(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	return os.Truncate(p, fi.Size()/2)
}

// fileDigest is the file's size and SHA-256, or "missing".
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%d bytes sha256:%x", len(b), sum[:8])
}
