package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// teardown tears the env down (see the package doc), once. Every step is
// best effort and logs what it could not do; none of them fails the test, so
// a failing test still gets all the later steps.
func (e *Env) teardown(logf func(string, ...any)) {
	e.tornDown.Do(func() { e.cleanup(logf) })
}

func (e *Env) cleanup(logf func(string, ...any)) {
	var facts []conflistFacts
	for _, b := range e.written {
		facts = append(facts, parseConflist(b))
	}
	// 1. Let teardown DELs succeed: remove failplugin trigger files.
	for _, f := range facts {
		for _, p := range f.triggers {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				logf("remove trigger %s: %v", p, err)
			}
		}
	}
	// 2. Stop and remove every sandbox through CRI (runs the CNI DELs).
	if e.cmd != nil && e.rt != nil {
		e.removeAllSandboxes(logf)
	}
	// 3. containerd, then whatever it left (shims, containers, mounts...).
	_ = e.stopContainerd(10 * time.Second)
	var bridges, networks []string
	for _, f := range facts {
		bridges = append(bridges, f.bridges...)
		if f.network != "" {
			networks = append(networks, f.network)
		}
	}
	teardownDir(e.Dir, e.Socket, e.RuncRoot, e.CgroupParent, bridges, networks, logf)
}

func (e *Env) removeAllSandboxes(logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := e.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		logf("ListPodSandbox: %v", err)
		return
	}
	for _, sb := range resp.GetItems() {
		if _, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			logf("StopPodSandbox %s: %v", short(sb.Id), err)
		}
		if _, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			logf("RemovePodSandbox %s: %v", short(sb.Id), err)
		}
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// teardownDir removes everything an env in dir may have left, given that its
// containerd is no longer running: containers (runc), shims bound to socket,
// mounts under dir, bridges, libcni cache files of networks, the cgroup
// parent, and dir itself.
func teardownDir(dir, socket, runcRoot, cgroupParent string, bridges, networks []string, logf func(string, ...any)) {
	// Containers: kill and delete with runc, which also removes their cgroups.
	nsRoot := filepath.Join(runcRoot, "k8s.io")
	if entries, err := os.ReadDir(nsRoot); runcRoot != "" && err == nil {
		runc, _ := exec.LookPath("runc")
		for _, ent := range entries {
			if !ent.IsDir() || runc == "" {
				continue
			}
			if out, err := exec.Command(runc, "--root", nsRoot, "delete", "--force", ent.Name()).CombinedOutput(); err != nil {
				logf("runc delete --force %s: %v: %s", short(ent.Name()), err, bytes.TrimSpace(out))
			}
		}
	}
	// Shims: the processes whose command line names this env's socket.
	var shimSockets []string
	if socket != "" {
		shimSockets = shimSocketFiles(filepath.Join(dir, "state"), socket)
		for _, pid := range pidsWithArg("-address", socket) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				waitGone(pid, 5*time.Second)
			}
		}
	}
	// containerd itself, when an earlier process started it (stale env).
	if b, err := os.ReadFile(filepath.Join(dir, "containerd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && cmdlineHas(pid, filepath.Join(dir, "config.toml")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid, 5*time.Second)
		}
	}
	for _, s := range shimSockets {
		_ = os.Remove(s)
	}
	// Processes run from binaries in dir: CNI plugins orphaned when a test
	// killed containerd during an ADD or DEL.
	for _, pid := range pidsWithExeUnder(dir) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			waitGone(pid, 5*time.Second)
		}
	}
	// Mounts under dir (netns bind mounts, overlay rootfs, shm...), deepest first.
	for _, m := range mountsUnder(dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			logf("umount %s: %v", m, err)
		}
	}
	for _, br := range bridges {
		if exec.Command("ip", "link", "show", "dev", br).Run() == nil {
			if out, err := exec.Command("ip", "link", "delete", "dev", br).CombinedOutput(); err != nil {
				logf("ip link delete %s: %v: %s", br, err, bytes.TrimSpace(out))
			}
		}
	}
	removeCNICache(dir, networks)
	if cgroupParent != "" && cgroupParent != "/" {
		removeCgroup(cgroupParent)
	}
	if err := os.RemoveAll(dir); err != nil {
		logf("remove %s: %v", dir, err)
	}
}

// cniCacheDir is libcni's default result cache, which containerd uses.
const cniCacheDir = "/var/lib/cni/results"

// removeCNICache removes libcni cache files of sandboxes under dir: a file
// recording its netns (libcni >= 1.2) is removed when that netns lies under
// dir (this also catches containerd's built-in "cni-loopback" network);
// one without (containerd 1.7's libcni) when it names one of networks. A
// file of another run's netns is never removed, whatever its network is
// called (two e2e/k8s nodes name their networks alike).
func removeCNICache(dir string, networks []string) {
	ents, err := os.ReadDir(cniCacheDir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		p := filepath.Join(cniCacheDir, ent.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var c struct {
			NetworkName string `json:"networkName"`
			Netns       string `json:"netns"`
		}
		if json.Unmarshal(b, &c) != nil {
			continue
		}
		if (c.Netns != "" && strings.HasPrefix(c.Netns, dir+"/")) ||
			(c.Netns == "" && slices.Contains(networks, c.NetworkName)) {
			_ = os.Remove(p)
		}
	}
}

// pidsWithExeUnder returns the processes whose executable lies under dir.
func pidsWithExeUnder(dir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && strings.HasPrefix(exe, dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// shimSocketFiles lists the shim sockets (main and debug) of every task
// bundle under state. containerd 2.x names them
// /run/containerd/s/<hex sha256(socket/<namespace>/<id>[/debug])>, where
// socket is containerd's gRPC address; a SIGKILLed shim leaves them behind.
func shimSocketFiles(state, socket string) []string {
	bundles, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*"))
	var out []string
	for _, b := range bundles {
		id, ns := filepath.Base(b), filepath.Base(filepath.Dir(b))
		for _, suffix := range []string{"", "/debug"} {
			sum := sha256.Sum256([]byte(socket + "/" + ns + "/" + id + suffix))
			out = append(out, "/run/containerd/s/"+hex.EncodeToString(sum[:]))
		}
	}
	return out
}

// pidsWithArg returns the processes whose argv holds flag followed by value.
func pidsWithArg(flag, value string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		args := cmdline(pid)
		for i := 0; i+1 < len(args); i++ {
			if args[i] == flag && args[i+1] == value {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func cmdlineHas(pid int, arg string) bool {
	for _, a := range cmdline(pid) {
		if a == arg {
			return true
		}
	}
	return false
}

func waitGone(pid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		// A zombie child of ours still answers kill(0); reap if it is ours.
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && bytes.Contains(st, []byte(") Z ")) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountsUnder returns mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroup removes parent (and any leftover children) in every mounted
// cgroup hierarchy (v1 controllers and the v2 unified mount).
func removeCgroup(parent string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		p := filepath.Join(r, parent)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

// reapStaleEnvs tears down env dirs whose owning test process is gone (a
// test binary killed by a timeout does not run its cleanups).
func reapStaleEnvs(t testing.TB) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), envPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue // being created right now, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // owner alive
		}
		t.Logf("e2e: reaping env %s left by dead process %d", dir, pid)
		var bridges, networks []string
		confs, _ := filepath.Glob(filepath.Join(dir, "cni-conf", "*"))
		for _, c := range confs {
			if b, err := os.ReadFile(c); err == nil {
				f := parseConflist(b)
				bridges = append(bridges, f.bridges...)
				if f.network != "" {
					networks = append(networks, f.network)
				}
			}
		}
		teardownDir(dir, filepath.Join(dir, "containerd.sock"), filepath.Join(dir, "runc"),
			"/"+filepath.Base(dir), bridges, networks, func(f string, a ...any) { t.Logf("e2e reap: "+f, a...) })
	}
}

// TeardownRuntimeDir tears down what any test runtime left under dir, for the
// runtimes whose processes the harness does not know by name (CRI-O and its
// conmon): every process whose executable lies under dir or whose command
// line names a path under dir is killed (the runtime itself first, when
// runtimePID > 0), then the mounts under dir are undone (deepest first), the
// bridges deleted, libcni's cache files of netns under dir or of networks
// removed, the cgroup parent removed and dir deleted.
func TeardownRuntimeDir(dir string, runtimePID int, cgroupParent string, bridges, networks []string, logf func(string, ...any)) {
	if runtimePID > 0 {
		if err := syscall.Kill(runtimePID, syscall.SIGKILL); err == nil {
			waitGone(runtimePID, 5*time.Second)
		}
	}
	pids := pidsWithExeUnder(dir)
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, a := range cmdline(pid) {
			if strings.Contains(a, dir+"/") || a == dir {
				pids = append(pids, pid)
				break
			}
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			waitGone(pid, 5*time.Second)
		}
	}
	teardownDir(dir, "", "", cgroupParent, bridges, networks, logf)
}

// ShimPIDs returns the processes whose command line names containerd socket
// as their -address: the shims of that containerd, alive after it is gone.
func ShimPIDs(socket string) []int { return pidsWithArg("-address", socket) }
