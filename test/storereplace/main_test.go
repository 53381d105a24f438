// Package storereplace runs real hostlease plugin processes beside the
// processes that replace a store file (`hostlease-gc rebuild`, with and
// without --force, and daemons that set aside and rebuild unreadable stores)
// and beside daemons sweeping while networks are first used, and judges with
// internal/testing/leasecheck that no acknowledged ADD is forgotten and no address is
// held twice. It proves the contract of pkg/allocator/store/lockfile.go: one
// writer per store file, every opener proves it holds the file at the path,
// a replacer holds the old file's lock from its read to its rename, a store
// is linked into place only once complete.
//
// The race windows are widened deterministically where an order of events
// can be forced: a plugin is stopped (SIGSTOP) once it holds the old file
// open and waits for its lock (seen in /proc/locks), the rebuild runs to its
// end, and the plugin is continued; two daemons both wait for a damaged
// store's lock before either reads it. A rebuild that let go of the lock
// between its read and its rename is caught by volume instead (25 rebuilds
// back to back beside 240 ADDs lose 16 or more of them).
//
// TestMain builds bin/hostlease and bin/hostlease-gc into a temporary directory.
package storereplace

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/fakecri"
	"github.com/hostlease/hostlease/internal/testing/leasecheck"
	"github.com/hostlease/hostlease/internal/testing/proclocks"
	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

var binDir string

func pluginBin() string { return filepath.Join(binDir, "hostlease") }
func gcBin() string     { return filepath.Join(binDir, "hostlease-gc") }

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, "storereplace", map[string]string{"hostlease": testbin.Plugin, "hostlease-gc": testbin.GC}, &binDir))
}

// hangGuard bounds every wait for an order of events: a guard against a hung
// test, never an assertion of how fast anything is.
const hangGuard = 2 * time.Minute

// node is a data dir, a netns dir and a fake runtime that lists every
// sandbox whose ADD was acknowledged and whose DEL has not started.
type node struct {
	t        *testing.T
	dataDir  string
	netnsDir string
	cri      *fakecri.Server
	book     *leasecheck.Book

	mu   sync.Mutex
	errs []string
	ops  int
}

func newNode(t *testing.T) *node {
	return &node{t: t, dataDir: t.TempDir(), netnsDir: t.TempDir(), cri: fakecri.StartForTest(t), book: leasecheck.NewBook()}
}

// conf is network's config: a /22 (1022 addresses).
func (n *node) conf(network, subnet string) []byte {
	b, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "bridge",
		"ipam": map[string]any{"type": "hostlease", "dataDir": n.dataDir, "ranges": [][]map[string]string{{{"subnet": subnet}}}},
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// pluginCmd prepares bin/hostlease for command on sandbox id, as a runtime
// runs it; extraArgs are appended to CNI_ARGS.
func (n *node) pluginCmd(command, id string, conf []byte, extraArgs string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(pluginBin())
	cmd.Env = []string{
		"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + filepath.Join(n.netnsDir, id),
		"CNI_IFNAME=eth0", "CNI_PATH=" + binDir,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-" + id + ";K8S_POD_UID=uid-" + id + ";K8S_POD_INFRA_CONTAINER_ID=" + id + extraArgs,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// finish waits for a started plugin process (bounded by the hang guard).
func finish(cmd *exec.Cmd, stdout, stderr *bytes.Buffer, start time.Time) cniexec.Outcome {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return cniexec.Classify(err, stdout.Bytes(), stderr.Bytes(), time.Since(start))
	case <-time.After(hangGuard):
		_ = cmd.Process.Kill()
		<-done
		return cniexec.Outcome{ExitErr: fmt.Errorf("hung: the plugin did not exit within %s", hangGuard)}
	}
}

// run runs the plugin once to completion.
func (n *node) run(command, id string, conf []byte, extraArgs string) cniexec.Outcome {
	cmd, stdout, stderr := n.pluginCmd(command, id, conf, extraArgs)
	start := time.Now()
	if err := os.WriteFile(filepath.Join(n.netnsDir, id), nil, 0o600); err != nil && command == "ADD" {
		return cniexec.Outcome{ExitErr: err}
	}
	if err := cmd.Start(); err != nil {
		return cniexec.Outcome{ExitErr: err}
	}
	return finish(cmd, stdout, stderr, start)
}

// acked books an acknowledged ADD of id and lists its sandbox as READY.
func (n *node) acked(id string, o cniexec.Outcome, start time.Time) (*leasecheck.Holding, netip.Addr) {
	ip, err := cniexec.ResultIP(o.Stdout)
	if err != nil {
		n.fail("ADD %s: %v", id, err)
		return nil, netip.Addr{}
	}
	h := &leasecheck.Holding{Owner: id, AddStart: start, AddDone: time.Now()}
	n.book.Hold(h, ip)
	n.cri.Ready(id, ip)
	n.count()
	return h, ip
}

// add runs ADD for id and books it when acknowledged.
func (n *node) add(id string, conf []byte, extraArgs string) (*leasecheck.Holding, netip.Addr, cniexec.Outcome) {
	start := time.Now()
	o := n.run("ADD", id, conf, extraArgs)
	if !o.OK() {
		n.count()
		return nil, netip.Addr{}, o
	}
	h, ip := n.acked(id, o, start)
	return h, ip, o
}

// del releases h as a runtime does: the sandbox stops being listed, then DEL.
func (n *node) del(h *leasecheck.Holding, conf []byte) {
	n.book.Releasing(h)
	n.cri.Remove(h.Owner)
	o := n.run("DEL", h.Owner, conf, "")
	n.count()
	if !o.OK() {
		n.fail("DEL %s: %s", h.Owner, o)
	}
}

func (n *node) count() {
	n.mu.Lock()
	n.ops++
	n.mu.Unlock()
}

func (n *node) operations() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ops
}

// fail records a failure seen by a worker goroutine.
func (n *node) fail(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.errs = append(n.errs, fmt.Sprintf(format, args...))
}

// gc runs bin/hostlease-gc once and returns its exit code and output.
func gc(args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, gcBin(), args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		return -1, fmt.Sprintf("%v: %s", err, out)
	}
	return 0, string(out)
}

// holders reads the records of every store in the data dir: address ->
// owners (a network's addresses are its own: the networks' subnets differ).
func (n *node) holders(networks ...string) map[netip.Addr][]string {
	n.t.Helper()
	out := map[netip.Addr][]string{}
	for _, network := range networks {
		s, err := store.Open(store.FilePath(n.dataDir, network), store.OpenOptions{ReadOnly: true, LockTimeout: hangGuard})
		if err != nil {
			n.t.Fatalf("reading the final store of %s: %v", network, err)
		}
		err = s.View(func(tx *store.Tx) error {
			return tx.ForEach(func(r *allocator.Record) error {
				out[r.IP] = append(out[r.IP], r.ContainerID)
				return nil
			})
		})
		s.Close()
		if err != nil {
			n.t.Fatal(err)
		}
	}
	return out
}

// judge fails the test for every worker failure, every address held twice
// and every acknowledged ADD the final stores forgot; it logs the figures.
func (n *node) judge(what string, networks ...string) {
	t := n.t
	t.Helper()
	final := n.holders(networks...)
	lost := n.book.Lost(func(ip netip.Addr, owner string) bool {
		for _, o := range final[ip] {
			if o == owner {
				return true
			}
		}
		return false
	})
	dups := n.book.Duplicates()
	n.mu.Lock()
	errs := n.errs
	n.mu.Unlock()
	t.Logf("%s: %d plugin operations; %d acknowledged ADDs lost, %d addresses held twice, %d failed calls", what, n.operations(), len(lost), len(dups), len(errs))
	for i, l := range lost {
		if i == 10 {
			break
		}
		t.Errorf("acknowledged ADD lost: %s of %s (ADD returned %s), not in the store at the end", l.IP, l.H.Owner, l.H.AddDone.Format(time.StampMicro))
	}
	for i, d := range dups {
		if i == 10 {
			break
		}
		t.Errorf("address held twice: %s by %s (ADD returned %s) and %s (ADD returned %s)", d.IP, d.A.Owner, d.A.AddDone.Format(time.StampMicro), d.B.Owner, d.B.AddDone.Format(time.StampMicro))
	}
	for i, e := range errs {
		if i == 10 {
			break
		}
		t.Errorf("failed: %s", e)
	}
}

// inode is the inode of the file at path (not followed).
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// lockPath takes the exclusive flock of the file at path with a raw
// descriptor, as any process outside hostlease could; closing it unlocks.
func lockPath(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return f
}

// waitFor polls cond until it holds, failing with "hung" after the guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("hung: %s did not happen within %s", what, hangGuard)
		}
	}
}

// stopped reports whether process pid is stopped (SIGSTOP): state T.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'T'
}

// stopWhileWaiting starts ADD for id and stops it (SIGSTOP) once it holds
// the store file at path open and waits for its lock, which the test holds
// meanwhile; the lock is released before it returns. The caller continues
// the process (SIGCONT) and finishes it.
func (n *node) stopWhileWaiting(path, id string, conf []byte) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, time.Time) {
	t := n.t
	t.Helper()
	held := lockPath(t, path)
	ino := inode(t, path)
	cmd, stdout, stderr := n.pluginCmd("ADD", id, conf, "")
	if err := os.WriteFile(filepath.Join(n.netnsDir, id), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waitFor(t, fmt.Sprintf("ADD %s waiting for the lock of the store file (inode %d)", id, ino), func() bool { return proclocks.Waiting(pid, ino) })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("ADD %s stopped", id), func() bool { return stopped(pid) })
	held.Close()
	return cmd, stdout, stderr, start
}
