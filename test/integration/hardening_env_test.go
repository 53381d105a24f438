package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Environment errors: an immutable store, a read-only file system, too many
// open files, a full file system.

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
		`mount -t tmpfs -o size=256k,mode=0755 tmpfs "$0" && (dd if=/dev/zero of="$0/fill" bs=4k 2>/dev/null; true) && exec "$1"`, dir}
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
