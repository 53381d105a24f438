package integration

// Issue 9, the plugin's side: real plugin processes against stores damaged
// the way bit rot, a bad restore or a bug leave them, and against an
// environment that refuses writes (read-only file system, immutable file,
// too many open files). Each test prints what it could not run and why.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/internal/cniexec"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// hardNet is a store of n containers c000.. made by real ADDs on 10.81.0.0/24.
type hardNet struct {
	ctx     context.Context
	network string
	dir     string
	path    string
	conf    []byte
	ips     map[string]netip.Addr // container -> address
}

func newHardNet(t *testing.T, network string, n int) *hardNet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	h := &hardNet{ctx: ctx, network: network, dir: t.TempDir(), ips: map[string]netip.Addr{}}
	h.conf = ipamConf(t, network, h.dir, "10.81.0.0/24")
	h.path = store.FilePath(h.dir, network)
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		h.ips[id] = h.mustAdd(t, id)
	}
	return h
}

func (h *hardNet) call(cmd, id string) call {
	return call{Command: cmd, ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id,
		Args: podArgs("ns", "pod-"+id, "uid-"+id, id)}
}

func (h *hardNet) run(cmd, id string) outcome { return runPlugin(h.ctx, h.call(cmd, id), h.conf) }

func (h *hardNet) mustAdd(t *testing.T, id string) netip.Addr {
	t.Helper()
	o := h.run("ADD", id)
	if !o.OK() {
		t.Fatalf("ADD %s: %v", id, o)
	}
	got, err := resultIPs(o.Stdout)
	if err != nil || len(got) != 1 {
		t.Fatalf("ADD %s result: %v %v", id, got, err)
	}
	return got[0].Addr()
}

// raw changes the store with bbolt directly, under its lock, bypassing
// pkg/allocator (as damage does).
func (h *hardNet) raw(t *testing.T, fn func(btx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(h.path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatalf("damaging the store: %v", err)
	}
}

// audit returns the store's audit actions.
func (h *hardNet) audit(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, ev := range readStoreLenient(t, h.path).audit {
		out = append(out, ev.Action)
	}
	return out
}

type lenientSnap struct {
	records []*allocator.Record
	damaged []allocator.DamagedRecord
	audit   []allocator.AuditEvent
}

// readStoreLenient reads a store that may hold damaged records.
func readStoreLenient(t *testing.T, path string) lenientSnap {
	t.Helper()
	s, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer s.Close()
	var snap lenientSnap
	if err := s.View(func(tx *store.Tx) error {
		snap.damaged = tx.DamagedRecords()
		if err := tx.ForEach(func(r *allocator.Record) error { snap.records = append(snap.records, r); return nil }); err != nil {
			return err
		}
		var err error
		snap.audit, err = tx.AuditLog(1 << 20)
		return err
	}); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return snap
}

func addrKeyOf(ip netip.Addr) []byte {
	if ip.Is4() {
		b := ip.As4()
		return append([]byte{4}, b[:]...)
	}
	b := ip.As16()
	return append([]byte{6}, b[:]...)
}

// A record that does not decode blocks nothing: DEL, CHECK and GC exit 0 for
// its own container and for the others, and its address is never handed out.
func TestHardeningDamagedRecord(t *testing.T) {
	for _, kind := range []string{"cut", "scrambled", "codec byte", "trailing bytes"} {
		t.Run(strings.ReplaceAll(kind, " ", "-"), func(t *testing.T) {
			h := newHardNet(t, "hlh-dmg", 4)
			victim := h.ips["c001"]
			h.raw(t, func(btx *bolt.Tx) error {
				b := btx.Bucket([]byte("allocs"))
				v := bytes.Clone(b.Get(addrKeyOf(victim)))
				switch kind {
				case "cut":
					v = v[:len(v)/2]
				case "scrambled":
					for i := 3; i < len(v); i += 2 {
						v[i] ^= 0x5a
					}
				case "codec byte":
					v[0] = 0x7f
				case "trailing bytes":
					v = append(v, 1, 2, 3)
				}
				return b.Put(addrKeyOf(victim), v)
			})
			if o := h.run("DEL", "c001"); !o.OK() {
				t.Errorf("DEL of the damaged record's container: %v", o)
			} else if !strings.Contains(string(o.Stderr), victim.String()) || !strings.Contains(string(o.Stderr), "damaged") {
				t.Errorf("DEL did not log that the damaged record %s may be its own: %s", victim, o.Stderr)
			}
			if o := h.run("DEL", "c001"); !o.OK() {
				t.Errorf("DEL retried: %v", o)
			}
			if o := h.run("CHECK", "c001"); !o.OK() {
				t.Errorf("CHECK of the damaged record's container: %v", o)
			}
			if o := h.run("CHECK", "c002"); !o.OK() {
				t.Errorf("CHECK of another container: %v", o)
			}
			if o := h.run("DEL", "c000"); !o.OK() {
				t.Errorf("DEL of another container: %v", o)
			}
			gcConf := bytes.Replace(h.conf, []byte(`{"bridge"`),
				[]byte(`{"cni.dev/valid-attachments":[{"containerID":"c002","ifname":"eth0"}],"bridge"`), 1)
			if !bytes.Contains(gcConf, []byte("valid-attachments")) {
				t.Fatalf("could not build the GC config from %s", h.conf)
			}
			if o := runPlugin(h.ctx, h.call("GC", ""), gcConf); !o.OK() {
				t.Errorf("GC: %v", o)
			}
			snap := readStoreLenient(t, h.path)
			var held []string
			for _, r := range snap.records {
				held = append(held, r.ContainerID)
			}
			if !slices.Equal(held, []string{"c002"}) {
				t.Errorf("after DEL c000 and GC keeping c002 the store holds %v, want c002 only", held)
			}
			if len(snap.damaged) != 1 || snap.damaged[0].IP != victim {
				t.Errorf("damaged records: %v, want the one at %s (kept reserved)", snap.damaged, victim)
			}
			// Exhaust the /24: the damaged record's address never comes back.
			for i := range 260 {
				o := h.run("ADD", fmt.Sprintf("n%03d", i))
				if !o.OK() {
					if o.Err != nil && o.Err.Code == allocator.ErrRangeExhausted {
						break
					}
					t.Fatalf("ADD n%03d: %v", i, o)
				}
				got, _ := resultIPs(o.Stdout)
				if len(got) == 1 && got[0].Addr() == victim {
					t.Fatalf("ADD n%03d was handed %s, the damaged record's address", i, victim)
				}
			}
		})
	}
}

// A cleared bit of the taken bitmap does not hand out the held address; the
// bitmap is repaired from the records and the repair audited.
func TestHardeningClearedBitmapBit(t *testing.T) {
	h := newHardNet(t, "hlh-bit", 3)
	held := h.ips["c000"]
	h.raw(t, func(btx *bolt.Tx) error {
		tb := btx.Bucket([]byte("takenbits"))
		k := addrKeyOf(held)
		off := int(k[3]&0x0f)<<8 | int(k[4])
		k[3] &^= 0x0f
		k[4] = 0
		bm := bytes.Clone(tb.Get(k))
		bm[off/8] &^= 1 << (off % 8)
		if err := tb.Put(k, bm); err != nil {
			return err
		}
		// Make round robin start over, at the held address.
		return btx.Bucket([]byte("meta")).Delete([]byte("last_reserved.0"))
	})
	got := h.mustAdd(t, "new")
	if got == held {
		t.Fatalf("ADD handed out %s, held by c000", got)
	}
	for _, id := range []string{"c000", "c001", "c002"} {
		if o := h.run("CHECK", id); !o.OK() {
			t.Errorf("CHECK %s: %v", id, o)
		}
	}
	if acts := h.audit(t); !slices.Contains(acts, allocator.AuditIndexRepair) {
		t.Errorf("no %s audit event: %v", allocator.AuditIndexRepair, acts)
	}
	checkIntegrity(t, readStore(t, h.path))
}

// With the owner index lost, DEL still releases the container's address.
func TestHardeningLostOwnerIndex(t *testing.T) {
	for _, how := range []string{"emptied", "entry-lost"} {
		t.Run(how, func(t *testing.T) {
			h := newHardNet(t, "hlh-own", 3)
			h.raw(t, func(btx *bolt.Tx) error {
				b := btx.Bucket([]byte("ownerhash"))
				var keys [][]byte
				b.ForEach(func(k, _ []byte) error {
					ip, _ := parseAddrKey(k[8:])
					if how == "emptied" || ip == h.ips["c001"] {
						keys = append(keys, bytes.Clone(k))
					}
					return nil
				})
				for _, k := range keys {
					if err := b.Delete(k); err != nil {
						return err
					}
				}
				return nil
			})
			if o := h.run("DEL", "c001"); !o.OK() {
				t.Fatalf("DEL: %v", o)
			}
			snap := readStore(t, h.path)
			for _, r := range snap.Records {
				if r.ContainerID == "c001" {
					t.Fatalf("DEL with the owner index %s released nothing: %s still held", how, r.IP)
				}
			}
			if len(snap.Records) != 2 {
				t.Errorf("store holds %d records, want 2", len(snap.Records))
			}
			checkIntegrity(t, snap)
			if o := h.run("CHECK", "c002"); !o.OK() {
				t.Errorf("CHECK c002 after the repair: %v", o)
			}
		})
	}
}

// wrapped runs the plugin under a wrapper command (prlimit, unshare...).
func wrapped(ctx context.Context, wrapper []string, c call, conf []byte) outcome {
	cmd := exec.CommandContext(ctx, wrapper[0], append(wrapper[1:], hostleaseBin())...)
	cmd.Env = c.env()
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	return cniexec.Classify(err, stdout.Bytes(), stderr.Bytes(), time.Since(start))
}

// envCase asserts the behaviour under an environment that refuses writes:
// DEL of an unknown container exits 0, DEL of a held one fails with 5 naming
// the errno, ADD fails with 5 naming it, STATUS reports 50; and the store is
// unchanged.
func envCase(t *testing.T, h *hardNet, errno string, run func(c call) outcome) {
	t.Helper()
	before := fileDigest(t, h.path)
	if o := run(h.call("DEL", "unknown")); !o.OK() {
		t.Errorf("DEL of an unknown container: %v", o)
	}
	o := run(h.call("DEL", "c000"))
	if o.Err == nil || o.Err.Code != 5 || !strings.Contains(o.Err.Msg, errno) || !strings.Contains(o.Err.Msg, h.ips["c000"].String()) {
		t.Errorf("DEL of a held container: %v; want CNI 5 naming %s and the address", o, errno)
	}
	o = run(h.call("ADD", "new"))
	if o.Err == nil || o.Err.Code != 5 || !strings.Contains(o.Err.Msg, errno) || !strings.Contains(o.Err.Msg, h.path) {
		t.Errorf("ADD: %v; want CNI 5 naming %s and %s", o, errno, h.path)
	} else {
		t.Logf("ADD: %d %s", o.Err.Code, o.Err.Msg)
	}
	if o := run(h.call("STATUS", "")); o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable {
		t.Errorf("STATUS: %v; want 50 (no ADD can succeed)", o)
	}
	if o := run(h.call("CHECK", "c001")); !o.OK() {
		t.Errorf("CHECK (a read): %v", o)
	}
	if after := fileDigest(t, h.path); after != before {
		t.Errorf("the store changed")
	}
}

func TestHardeningImmutableStore(t *testing.T) {
	h := newHardNet(t, "hlh-immut", 2)
	if out, err := exec.Command("chattr", "+i", h.path).CombinedOutput(); err != nil {
		t.Skipf("chattr +i unsupported here (%v: %s): the immutable-file case is not run", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("chattr", "-i", h.path).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v %s", h.path, err, out)
		}
	})
	envCase(t, h, "EPERM", func(c call) outcome { return runPlugin(h.ctx, c, h.conf) })
}

func TestHardeningReadOnlyFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a private read-only bind mount (unshare -m)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not found: the read-only file system case is not run")
	}
	h := newHardNet(t, "hlh-rofs", 2)
	// A private mount namespace for the plugin only: the host's mounts are
	// never touched.
	wrapper := []string{"unshare", "-m", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$1"`, h.dir}
	if o := wrapped(h.ctx, wrapper, h.call("VERSION", ""), nil); o.ExitErr != nil {
		t.Skipf("cannot make a read-only bind mount here: %v", o)
	}
	envCase(t, h, "EROFS", func(c call) outcome { return wrapped(h.ctx, wrapper, c, h.conf) })
}

func TestHardeningTooManyOpenFiles(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit not found: the EMFILE case is not run")
	}
	h := newHardNet(t, "hlh-emfile", 2)
	// stdin, stdout and stderr only: the store cannot be opened. Both limits:
	// Go raises the soft limit to the hard one at start.
	wrapper := []string{"prlimit", "--nofile=3:3", "--"}
	before := fileDigest(t, h.path)
	for _, cmd := range []string{"ADD", "DEL"} {
		o := wrapped(h.ctx, wrapper, h.call(cmd, "c000"), h.conf)
		if o.Err == nil || o.Err.Code != 5 || !strings.Contains(o.Err.Msg, "EMFILE") || !strings.Contains(o.Err.Msg, h.path) {
			t.Errorf("%s with RLIMIT_NOFILE 3: %v; want CNI 5 naming EMFILE and the store", cmd, o)
		} else {
			t.Logf("%s: %d %s", cmd, o.Err.Code, o.Err.Msg)
		}
	}
	if after := fileDigest(t, h.path); after != before {
		t.Error("the store changed")
	}
	// Nothing was set aside or lost: with the limit gone, all is as before.
	if o := h.run("DEL", "c000"); !o.OK() {
		t.Errorf("DEL after: %v", o)
	}
	if o := h.run("CHECK", "c001"); !o.OK() {
		t.Errorf("CHECK after: %v", o)
	}
}

// A symlink in place of <net>.db is never followed: nothing is created at
// its target; ADD fails naming it, DEL of a dangling one exits 0.
func TestHardeningSymlinkStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	network := "hlh-link"
	conf := ipamConf(t, network, dir, "10.82.0.0/24")
	target := filepath.Join(t.TempDir(), "elsewhere.db")
	path := store.FilePath(dir, network)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/var/run/netns/a"}
	o := runPlugin(ctx, c, conf)
	if o.Err == nil || o.Err.Code != 5 || !strings.Contains(o.Err.Msg, path) || !strings.Contains(o.Err.Msg, "symlink") {
		t.Errorf("ADD with a dangling symlink at the store path: %v; want CNI 5 naming it", o)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was created at the symlink's target %s", target)
	}
	c.Command = "DEL"
	if o := runPlugin(ctx, c, conf); !o.OK() {
		t.Errorf("DEL with a dangling symlink at the store path: %v", o)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v", err)
	}
}

// A network name of 240 characters works as with host-local; one too long
// for "<name>.db" gets a shortened, deterministic store file name.
func TestHardeningLongNetworkName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []int{240, 252, 255} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			network := "l" + strings.Repeat("o", n-2) + "g"
			dir := t.TempDir()
			conf := ipamConf(t, network, dir, "10.83.0.0/24")
			c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/var/run/netns/a"}
			for _, cmd := range []string{"ADD", "CHECK", "DEL"} {
				c.Command = cmd
				if o := runPlugin(ctx, c, conf); !o.OK() {
					t.Fatalf("%s on a %d-character network name: %v", cmd, n, o)
				}
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 || len(entries[0].Name()) > 255 {
				t.Fatalf("data dir holds %v", entries)
			}
			if n <= 252 && entries[0].Name() != network+".db" {
				t.Errorf("store file %s, want %s.db", entries[0].Name(), network)
			}
			if filepath.Join(dir, entries[0].Name()) != store.FilePath(dir, network) {
				t.Errorf("store file %s is not StorePath's", entries[0].Name())
			}
		})
	}
}

// Temporary files a first use killed with SIGKILL left behind are removed by
// the next first use once they are old enough.
func TestHardeningStaleTempFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	network := "hlh-tmp"
	conf := ipamConf(t, network, dir, "10.84.0.0/24")
	old := time.Now().Add(-time.Hour)
	stale := []string{"." + network + ".db.new-2816350431", ".new-0123456789abcdef-998877"}
	for _, name := range stale {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	young := filepath.Join(dir, ".new-fedcba9876543210-1")
	os.WriteFile(young, nil, 0o600)
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, conf); !o.OK() {
		t.Fatalf("ADD: %v", o)
	}
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale temporary file %s left in place (%v)", name, err)
		}
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a temporary file younger than %s was removed: %v", store.StaleTempAge, err)
	}
}

// "ipam": null, or no ipam under a non-hostlease type, is host-local's
// "missing 'ipam' key", never the commit marker.
func TestHardeningMissingIPAM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	for name, conf := range map[string]string{
		"ipam null":                   `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"bridge","dataDir":"` + dir + `","ipam":null}`,
		"ipam null, type hostlease":   `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"hostlease","dataDir":"` + dir + `","ipam":null}`,
		"no ipam, bridge":             `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"bridge","dataDir":"` + dir + `"}`,
		"no ipam, host-local as type": `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"host-local","dataDir":"` + dir + `"}`,
	} {
		for _, cmd := range []string{"ADD", "DEL", "CHECK"} {
			o := runPlugin(ctx, call{Command: cmd, ContainerID: "a", IfName: "eth0", Netns: "/x"}, []byte(conf))
			if o.Err == nil || o.Err.Code != 7 || o.Err.Msg != "IPAM config missing 'ipam' key" {
				t.Errorf("%s %s: %v; want CNI 7 \"IPAM config missing 'ipam' key\"", name, cmd, o)
			}
		}
	}
	// The marker itself still works.
	marker := `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"hostlease","dataDir":"` + dir + `"}`
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, []byte(marker)); !o.OK() {
		t.Errorf("commit marker ADD: %v", o)
	}
}

// After a switch from host-local, podman tears containers down with its
// cached host-local config: the real host-local's DEL removes its file, and
// the next hostlease ADD releases that imported record (audited), and only it.
func TestHardeningHostLocalMigrationLeak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hlBin := filepath.Join(binDir, "host-local") // built by TestMain
	dir := t.TempDir()
	network := "hlh-podman"
	conf := ipamConf(t, network, dir, "10.85.0.0/24")
	hostLocalConf := bytes.Replace(conf, []byte(`"type":"hostlease"`), []byte(`"type":"host-local"`), 1)
	hostLocal := func(cmd, id string) {
		t.Helper()
		c := exec.CommandContext(ctx, hlBin)
		c.Env = call{Command: cmd, ContainerID: id, IfName: "eth0", Netns: "/x"}.env()
		c.Stdin = bytes.NewReader(hostLocalConf)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("host-local %s %s: %v\n%s", cmd, id, err, out)
		}
	}
	for _, id := range []string{"podA", "podB", "podC"} {
		hostLocal("ADD", id)
	}
	add := func(id string) {
		t.Helper()
		if o := runPlugin(ctx, call{Command: "ADD", ContainerID: id, IfName: "eth0", Netns: "/x"}, conf); !o.OK() {
			t.Fatalf("ADD %s: %v", id, o)
		}
	}
	add("new1") // the switch: imports podA, podB, podC
	path := store.FilePath(dir, network)
	if n := len(readStoreLenient(t, path).records); n != 4 {
		t.Fatalf("after the import the store holds %d records, want 4", n)
	}
	hostLocal("DEL", "podB") // podman, with its cached host-local config
	add("new2")
	snap := readStoreLenient(t, path)
	var held []string
	for _, r := range snap.records {
		held = append(held, r.ContainerID)
	}
	slices.Sort(held)
	if !slices.Equal(held, []string{"new1", "new2", "podA", "podC"}) {
		t.Errorf("store holds %v; want podB's imported record released", held)
	}
	if !slices.ContainsFunc(snap.audit, func(e allocator.AuditEvent) bool {
		return e.Action == allocator.AuditHostLocalGone && e.ContainerID == "podB"
	}) {
		t.Errorf("no %s audit event for podB: %v", allocator.AuditHostLocalGone, snap.audit)
	}
	checkIntegrity(t, readStore(t, path))
}

// A leaf page with a zeroed type: DEL exits 0, and the answers of ADD and of
// an open agree with errors.go's rule (page damage is never "unreadable",
// which is what makes the daemon rebuild).
func TestHardeningZeroedLeafPage(t *testing.T) {
	h := newHardNet(t, "hlh-page", 200)
	db, err := bolt.Open(h.path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	db.View(func(btx *bolt.Tx) error { root = uint64(btx.Bucket([]byte("allocs")).RootPage()); return nil })
	pageSize := db.Info().PageSize
	db.Close()
	data, err := os.ReadFile(h.path)
	if err != nil {
		t.Fatal(err)
	}
	branch := data[int(root)*pageSize:]
	if binary.LittleEndian.Uint16(branch[8:]) != 0x01 {
		t.Skip("allocs fits one leaf page here; no branch to damage below")
	}
	first := binary.LittleEndian.Uint64(branch[16+8:]) // the lowest addresses' leaf
	binary.LittleEndian.PutUint16(data[int(first)*pageSize+8:], 0)
	if err := os.WriteFile(h.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c000", "c199", "unknown"} {
		if o := h.run("DEL", id); !o.OK() {
			t.Errorf("DEL %s on a store with a zeroed leaf page: %v", id, o)
		}
	}
	o := h.run("ADD", "new")
	if !o.OK() && (o.Err == nil || o.Err.Code == 11 || strings.Contains(o.Err.Msg, "unreadable")) {
		t.Errorf("ADD on a store with a damaged page: %v; want success or CNI 5 'store damaged', never 'unreadable' (the daemon would rebuild)", o)
	}
	s, err := store.Open(h.path, store.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("open (as the daemon does): %v", err)
	}
	err = s.View(func(tx *store.Tx) error { tx.ScanRecords(&store.RecordCache{}); return nil })
	s.Close()
	if !errors.Is(err, store.ErrPageDamaged) || errors.Is(err, store.ErrUnreadable) {
		t.Errorf("the daemon's scan: %v; want ErrStorePageDamaged (not set aside)", err)
	}
}

// A full file system is an environment error: the first ADD of a network
// fails with 5 naming ENOSPC (never "unreadable"), DEL of an unknown
// container exits 0.
func TestHardeningFullFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a private tmpfs (unshare -m)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not found: the full file system case is not run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	conf := ipamConf(t, "hlh-full", dir, "10.86.0.0/24")
	// Each call gets its own mount namespace with a 256 KiB tmpfs over the
	// data dir, filled to the last block: the host's mounts are untouched.
	wrapper := []string{"unshare", "-m", "--propagation", "private", "--", "sh", "-c",
		`mount -t tmpfs -o size=256k tmpfs "$0" && (dd if=/dev/zero of="$0/fill" bs=4k 2>/dev/null; true) && exec "$1"`, dir}
	if o := wrapped(ctx, wrapper, call{Command: "VERSION"}, nil); o.ExitErr != nil {
		t.Skipf("cannot mount a private tmpfs here: %v", o)
	}
	c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}
	o := wrapped(ctx, wrapper, c, conf)
	path := store.FilePath(dir, "hlh-full")
	if o.Err == nil || o.Err.Code != 5 || !strings.Contains(o.Err.Msg, "ENOSPC") || !strings.Contains(o.Err.Msg, path) || strings.Contains(o.Err.Msg, "unreadable") {
		t.Errorf("ADD on a full file system: %v; want CNI 5 naming ENOSPC and %s", o, path)
	} else {
		t.Logf("ADD: %d %s", o.Err.Code, o.Err.Msg)
	}
	c.Command = "DEL"
	if o := wrapped(ctx, wrapper, c, conf); !o.OK() {
		t.Errorf("DEL on a full file system: %v", o)
	}
}

// STATUS fails only when no ADD can succeed: a full pool is fine by default
// (a STATUS error costs the node its pods) and 50 only with the opt-in; a
// data dir where no store can be created is 50.
func TestHardeningStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	status := func(conf []byte) outcome { return runPlugin(ctx, call{Command: "STATUS"}, conf) }
	tiny := ipamConf(t, "hlh-status", dir, "10.87.0.0/30") // one allocatable address
	if o := status(tiny); !o.OK() {
		t.Errorf("STATUS before the first ADD: %v", o)
	}
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, tiny); !o.OK() {
		t.Fatalf("ADD: %v", o)
	}
	if o := status(tiny); !o.OK() {
		t.Errorf("STATUS on a full pool, by default: %v; want success (exhaustion is an alert, not a node outage)", o)
	}
	optIn := bytes.Replace(tiny, []byte(`"type":"hostlease"`), []byte(`"failStatusOnExhaustion":true,"type":"hostlease"`), 1)
	if o := status(optIn); o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable {
		t.Errorf("STATUS on a full pool with failStatusOnExhaustion: %v; want 50", o)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the read-only data dir case is not run")
		return
	}
	fresh := t.TempDir()
	wrapper := []string{"unshare", "-m", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$1"`, fresh}
	o := wrapped(ctx, wrapper, call{Command: "STATUS"}, ipamConf(t, "hlh-status", filepath.Join(fresh, "sub"), "10.87.0.0/24"))
	if o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable || !strings.Contains(o.Err.Msg, fresh) {
		t.Errorf("STATUS with a data dir that cannot be created: %v; want 50 naming %s", o, fresh)
	}
}
