package faultinject

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The environment classes: the store is fine, the machine around it is not.
// A read-only data dir, a full disk, an immutable store file and a process out
// of file descriptors are I/O errors, not damage: a call that must write fails
// with CNI error 5 naming the errno, a DEL with nothing to release exits 0,
// and the daemon never sets the store aside or rebuilds it.
//
// test/integration's TestHardening{ReadOnlyFilesystem,FullFilesystem,
// ImmutableStore,TooManyOpenFiles} (h9-alloc) cover the plugin's verbs one by
// one; these run a whole episode: the plugin, the CLI and a daemon sweep in
// the same environment, and the store afterwards.
//
// Each case changes only processes the test starts: a private mount namespace
// held open by a sleeping process (unshare -m; the host's mounts are never
// touched and the namespace goes away with that process), chattr on a file in
// the test's own directory (undone at cleanup), or prlimit on the child.

// mountNS is a private mount namespace kept alive by a process the test
// started; commands run in it through nsenter.
type mountNS struct {
	pid int
}

// newMountNS runs setup (a shell script; $0 is arg) in a new private mount
// namespace and keeps the namespace until the test ends.
func newMountNS(t *testing.T, setup, arg string) *mountNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a mount namespace (unshare -m)")
	}
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (util-linux): %v", tool, err)
		}
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-ec", setup+"\necho ready\nexec sleep 3600", arg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ns := &mountNS{pid: cmd.Process.Pid}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("mount namespace setup failed: %q %v; stderr: %s", line, err, stderr.String())
	}
	return ns
}

// wrap makes cmd run inside the namespace.
func (ns *mountNS) wrap(cmd *exec.Cmd) {
	args := append([]string{"nsenter", "--target", strconv.Itoa(ns.pid), "--mount", "--", cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = "/usr/bin/nsenter", args
	if p, err := exec.LookPath("nsenter"); err == nil {
		cmd.Path = p
	}
}

// path is where a path inside the namespace is seen from the test process.
func (ns *mountNS) path(p string) string { return fmt.Sprintf("/proc/%d/root%s", ns.pid, p) }

// envNode is a data dir with a store, one held sandbox and a fake runtime.
type envNode struct {
	t       *testing.T
	dataDir string
	netns   string
	conf    []byte
	n       *node
}

func newEnvNode(t *testing.T) *envNode {
	t.Helper()
	e := &envNode{t: t, dataDir: t.TempDir(), netns: t.TempDir()}
	e.conf = netConf(e.dataDir)
	e.n = &node{t: t, dataDir: e.dataDir, netnsDir: e.netns, cri: startCRI(t), conf: e.conf,
		m: &model{owners: map[string]*owner{}, quarantined: map[netip.Addr]bool{}}}
	return e
}

func (e *envNode) call(verb, id string, wrap func(*exec.Cmd)) outcome {
	netns := filepath.Join(e.netns, "cni-"+shortName(id))
	if verb == "ADD" {
		_ = os.WriteFile(netns, nil, 0o600)
	}
	return runPlugin(invocation{Command: verb, ContainerID: id, Netns: netns, Conf: e.conf, Wrap: wrap})
}

// hold ADDs a sandbox normally (outside any namespace or limit) and lists it
// READY in the runtime.
func (e *envNode) hold(id string, wrap func(*exec.Cmd)) netip.Addr {
	e.t.Helper()
	o := e.call("ADD", id, wrap)
	if !o.OK() {
		e.t.Fatalf("ADD %s: %v", id, o)
	}
	ip, err := resultIP(o.Stdout)
	if err != nil {
		e.t.Fatal(err)
	}
	e.n.cri.Ready(id, ip)
	return ip
}

// wantIOError asserts CNI error 5 whose message names the errno.
func wantIOError(t *testing.T, what string, o outcome, errno syscall.Errno) {
	t.Helper()
	switch {
	case o.OK():
		t.Errorf("%s: exited 0, want CNI error 5 naming %q", what, errno.Error())
	case o.Err == nil || o.Err.Code != 5:
		t.Errorf("%s: want CNI error 5 naming %q, got %v", what, errno.Error(), o)
	case !strings.Contains(strings.ToLower(o.Err.Msg+" "+o.Err.Details), errno.Error()):
		t.Errorf("%s: CNI error 5 does not name %q: %v", what, errno.Error(), o)
	}
}

func wantOK(t *testing.T, what string, o outcome) {
	t.Helper()
	if !o.OK() {
		t.Errorf("%s: want exit 0, got %v", what, o)
	}
}

var setAsideWords = regexp.MustCompile(`(?i)set aside|rebuil|corrupt-`)

// wantInPlace asserts the store file is the one it was and nothing was set
// aside next to it.
func wantInPlace(t *testing.T, what, path string, before os.FileInfo, log []string) {
	t.Helper()
	after, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: store gone: %v", what, err)
		return
	}
	if !os.SameFile(before, after) {
		t.Errorf("%s: the store was replaced", what)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), filepath.Base(path)+".") {
			t.Errorf("%s: %s appeared next to the store (set aside or left over)", what, e.Name())
		}
	}
	for _, l := range log {
		if setAsideWords.MatchString(l) {
			t.Errorf("%s: the daemon treated an I/O error as damage: %s", what, l)
		}
	}
}

// heldIn reads who holds ip in the store at path (seen from the test).
func heldIn(t *testing.T, path string, id string) []netip.Addr {
	t.Helper()
	v, err := readView(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return v.heldBy(id)
}

func (e *envNode) sweepIn(wrap func(*exec.Cmd)) []string {
	return daemonSweepIn(e.t, wrap, 1, "--cri-endpoint", e.n.cri.Endpoint(), "--data-dir", e.dataDir,
		"--netns-dir", e.netns, "--interval", "30m", "--misses", "1", "--netns-grace", "0s").Log
}

// TestEnvReadOnlyDataDir: the data dir is a read-only bind mount.
func TestEnvReadOnlyDataDir(t *testing.T) {
	e := newEnvNode(t)
	held := "ro-held-" + strings.Repeat("a", 40)
	ip := e.hold(held, nil)
	path := filepath.Join(e.dataDir, network+".db")
	before, _ := os.Stat(path)
	ns := newMountNS(t, `mount --bind "$0" "$0"; mount -o remount,bind,ro "$0" "$0"`, e.dataDir)

	wantOK(t, "DEL of a sandbox that holds nothing, on a read-only data dir", e.call("DEL", "ro-unknown", ns.wrap))
	wantIOError(t, "DEL of a sandbox that holds an address, on a read-only data dir", e.call("DEL", held, ns.wrap), syscall.EROFS)
	wantIOError(t, "ADD on a read-only data dir", e.call("ADD", "ro-new", ns.wrap), syscall.EROFS)
	wantOK(t, "CHECK (reads only) on a read-only data dir", e.call("CHECK", held, ns.wrap))
	if list := runCLIIn(t, ns.wrap, "list", "--data-dir", e.dataDir); list.Code != 0 || !strings.Contains(list.Stdout, ip.String()) {
		t.Errorf("list on a read-only data dir: want exit 0 showing %s:\n%s", ip, list)
	}
	wantInPlace(t, "after a sweep on a read-only data dir", path, before, e.sweepIn(ns.wrap))
	if got := heldIn(t, path, held); len(got) != 1 || got[0] != ip {
		t.Errorf("%s held %s before; after the read-only episode the store says %v", shortName(held), ip, got)
	}
	wantOK(t, "DEL once the data dir is writable again", e.call("DEL", held, nil))
}

// TestEnvFullDisk: the data dir is a small tmpfs, filled.
func TestEnvFullDisk(t *testing.T) {
	e := newEnvNode(t)
	ns := newMountNS(t, `mount -t tmpfs -o size=256k,mode=0755 hostlease-fi "$0"`, e.dataDir)
	held := "full-held-" + strings.Repeat("b", 40)
	ip := e.hold(held, ns.wrap)
	path := ns.path(filepath.Join(e.dataDir, network+".db"))
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	fill := exec.Command("sh", "-c", `cat /dev/zero > "$0/fill"; test -s "$0/fill"`, e.dataDir)
	ns.wrap(fill)
	if out, err := fill.CombinedOutput(); err != nil && !strings.Contains(string(out), "No space left") {
		t.Fatalf("filling the tmpfs: %v %s", err, out)
	}

	// First use of a network on a full disk: nothing can be created.
	other := netConf(e.dataDir)
	other = []byte(strings.Replace(string(other), `"name":"`+network+`"`, `"name":"fullnew"`, 1))
	o := runPlugin(invocation{Command: "ADD", ContainerID: "full-first", Netns: "/nonexistent", Conf: other, Wrap: ns.wrap})
	wantIOError(t, "ADD creating a store on a full disk", o, syscall.ENOSPC)
	wantOK(t, "DEL on a network whose store could not be created", runPlugin(invocation{Command: "DEL", ContainerID: "full-first", Netns: "/nonexistent", Conf: other, Wrap: ns.wrap}))
	if left, _ := filepath.Glob(ns.path(filepath.Join(e.dataDir, ".fullnew.db*"))); len(left) > 0 {
		t.Errorf("a failed store creation left %v", left)
	}

	// An existing store: each call either succeeds or fails with ENOSPC,
	// and the store keeps its old state when it fails.
	wantOK(t, "DEL of a sandbox that holds nothing, on a full disk", e.call("DEL", "full-unknown", ns.wrap))
	if o := e.call("ADD", "full-new", ns.wrap); !o.OK() {
		wantIOError(t, "ADD on a full disk", o, syscall.ENOSPC)
	} else if ip2, err := resultIP(o.Stdout); err != nil || len(heldIn(t, path, "full-new")) != 1 || ip2 == ip {
		t.Errorf("ADD on a full disk exited 0 with %s (%v), store holds %v", ip2, err, heldIn(t, path, "full-new"))
	}
	if o := e.call("DEL", held, ns.wrap); !o.OK() {
		wantIOError(t, "DEL of a held address on a full disk", o, syscall.ENOSPC)
		if got := heldIn(t, path, held); len(got) != 1 || got[0] != ip {
			t.Errorf("a failed DEL changed the store: %s holds %v, want [%s]", shortName(held), got, ip)
		}
	} else if got := heldIn(t, path, held); len(got) != 0 {
		t.Errorf("DEL exited 0 on a full disk but %s still holds %v", shortName(held), got)
	}
	wantInPlace(t, "after a sweep on a full disk", path, before, e.sweepIn(ns.wrap))
	if _, err := readView(path); err != nil {
		t.Errorf("the store is unreadable after the full-disk episode: %v", err)
	}
}

// TestEnvImmutableStore: the store file is immutable (chattr +i).
func TestEnvImmutableStore(t *testing.T) {
	e := newEnvNode(t)
	held := "immutable-held-" + strings.Repeat("c", 40)
	ip := e.hold(held, nil)
	path := filepath.Join(e.dataDir, network+".db")
	before, _ := os.Stat(path)
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skipf("chattr not installed: %v", err)
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("the file system of %s does not support immutable files (chattr +i: %v %s)", path, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("chattr", "-i", path).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v %s", path, err, out)
		}
	})

	wantOK(t, "DEL of a sandbox that holds nothing, on an immutable store", e.call("DEL", "immutable-unknown", nil))
	wantIOError(t, "DEL of a held address on an immutable store", e.call("DEL", held, nil), syscall.EPERM)
	wantIOError(t, "ADD on an immutable store", e.call("ADD", "immutable-new", nil), syscall.EPERM)
	wantOK(t, "CHECK (reads only) on an immutable store", e.call("CHECK", held, nil))
	if list := runCLI(t, "list", "--data-dir", e.dataDir); list.Code != 0 || !strings.Contains(list.Stdout, ip.String()) {
		t.Errorf("list on an immutable store: want exit 0 showing %s:\n%s", ip, list)
	}
	wantInPlace(t, "after a sweep on an immutable store", path, before, e.sweepIn(nil))
	if out, err := exec.Command("chattr", "-i", path).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	if got := heldIn(t, path, held); len(got) != 1 || got[0] != ip {
		t.Errorf("%s held %s before; after the immutable episode the store says %v", shortName(held), ip, got)
	}
	wantOK(t, "DEL once the store is writable again", e.call("DEL", held, nil))
}

// TestEnvTooManyOpenFiles: the plugin runs with RLIMIT_NOFILE 3 (soft and
// hard, set on the child with prlimit): it cannot open the store.
func TestEnvTooManyOpenFiles(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("needs prlimit (util-linux): %v", err)
	}
	e := newEnvNode(t)
	held := "emfile-held-" + strings.Repeat("d", 40)
	ip := e.hold(held, nil)
	path := filepath.Join(e.dataDir, network+".db")
	before, _ := os.Stat(path)
	limit := func(cmd *exec.Cmd) {
		cmd.Args = append([]string{"prlimit", "--nofile=3:3", "--", cmd.Path}, cmd.Args[1:]...)
		cmd.Path = prlimit
	}
	wantIOError(t, "ADD out of file descriptors", e.call("ADD", "emfile-new", limit), syscall.EMFILE)
	wantIOError(t, "DEL of a held address out of file descriptors", e.call("DEL", held, limit), syscall.EMFILE)
	if o := e.call("DEL", "emfile-unknown", limit); !o.OK() {
		// Without a descriptor it cannot know the sandbox holds nothing:
		// then it must say why.
		wantIOError(t, "DEL of a sandbox that holds nothing, out of file descriptors", o, syscall.EMFILE)
	}
	wantInPlace(t, "after EMFILE", path, before, nil)
	if got := heldIn(t, path, held); len(got) != 1 || got[0] != ip {
		t.Errorf("%s held %s before; after the EMFILE episode the store says %v", shortName(held), ip, got)
	}
	wantOK(t, "DEL with file descriptors again", e.call("DEL", held, nil))
}

// TestEnvDaemonOutOfFileDescriptors: the daemon runs out of file descriptors
// while the runtime stays reachable (its RLIMIT_NOFILE is lowered, with
// prlimit --pid, to its lowest free descriptor: every open fails with
// EMFILE). Sweeps go on and fail to read the store; the store must not be set
// aside or rebuilt, and once descriptors are back the daemon sweeps it again
// (a sandbox torn down then is reclaimed).
func TestEnvDaemonOutOfFileDescriptors(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("needs prlimit (util-linux): %v", err)
	}
	e := newEnvNode(t)
	live := "emfiled-live-" + strings.Repeat("f", 40)
	gone := "emfiled-gone-" + strings.Repeat("g", 40)
	liveIP := e.hold(live, nil)
	e.hold(gone, nil)
	path := filepath.Join(e.dataDir, network+".db")
	before, _ := os.Stat(path)
	d := startDaemon(t, nil, "--cri-endpoint", e.n.cri.Endpoint(), "--data-dir", e.dataDir, "--netns-dir", e.netns,
		"--interval", "1s", "--misses", "1", "--netns-grace", "0s")
	d.waitFor("a first sweep", func() bool { return e.n.cri.Lists() >= 1 })
	pid := d.Cmd.Process.Pid
	// Only the soft limit moves: raising a hard limit again needs
	// CAP_SYS_RESOURCE, which a container may not have.
	setLimit := func(soft string) {
		t.Helper()
		if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(pid), "--nofile="+soft+":").CombinedOutput(); err != nil {
			t.Fatalf("prlimit --pid %d --nofile=%s: %v %s", pid, soft, err, out)
		}
	}
	out, err := exec.Command(prlimit, "--pid", strconv.Itoa(pid), "--nofile", "--raw", "--noheadings", "--output=SOFT").Output()
	if err != nil {
		t.Fatalf("prlimit --pid %d: %v", pid, err)
	}
	soft := strings.TrimSpace(string(out))
	// The lowest free descriptor while the daemon has no store file open (a
	// sweep in progress holds one for a moment; its number must not count).
	var lowest int
	d.waitFor("the daemon between sweeps", func() bool {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return false
		}
		open := map[int]bool{}
		for _, f := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, f.Name())); strings.HasPrefix(l, e.dataDir) {
				return false
			}
			n, _ := strconv.Atoi(f.Name())
			open[n] = true
		}
		for lowest = 0; open[lowest]; lowest++ {
		}
		return true
	})
	setLimit(strconv.Itoa(lowest))
	limited := e.n.cri.Lists()
	d.waitFor("two sweeps out of file descriptors, reported", func() bool {
		return e.n.cri.Lists() >= limited+2 && strings.Contains(strings.Join(d.log(), "\n"), syscall.EMFILE.Error())
	})
	setLimit(soft)
	e.n.cri.Remove(gone)
	if err := os.Remove(filepath.Join(e.netns, "cni-"+shortName(gone))); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the torn-down sandbox reclaimed once descriptors are back", func() bool {
		v, err := readView(path)
		return err == nil && len(v.heldBy(gone)) == 0
	})
	d.stop()
	for _, l := range d.log() {
		if strings.Contains(l, syscall.EMFILE.Error()) {
			t.Logf("daemon: %s", l)
			break
		}
	}
	wantInPlace(t, "after sweeps out of file descriptors", path, before, d.log())
	if got := heldIn(t, path, live); len(got) != 1 || got[0] != liveIP {
		t.Errorf("%s held %s before; after the EMFILE episode the store says %v", shortName(live), liveIP, got)
	}
}
