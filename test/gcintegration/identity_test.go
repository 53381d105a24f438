package gcintegration

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/gcproc"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// These tests give a live sandbox (a process in its own network namespace,
// its address configured there) a netns whose path the plugin and the daemon
// then find gone, in a directory whose device and inode numbers are the ones
// the plugin recorded: a new tmpfs mounted in place of the netns directory's
// old one (the kernel gives it the freed device number and the same root
// inode), the directory removed and created again on ext4 (the freed inode
// again), or the netns path removed while the namespace lives. No release
// may follow: not by an exhaustion ADD, not by an ADD of the same pod, not by
// the daemon's sweep. Everything runs in a private mount namespace held by a
// sleeping process (nothing mounted there reaches the host); the processes
// are killed by PID when the test ends.

// holder is a process sleeping in a namespace of its own kind (mount or
// network), killed when the test ends.
type holder struct {
	t   *testing.T
	pid int
}

// startHolder runs `unshare --<kind> sleep` and waits until the sleeping
// process is in a namespace other than this process's.
func startHolder(t *testing.T, kind string, extra ...string) *holder {
	t.Helper()
	args := append([]string{"--" + kind}, extra...)
	cmd := exec.Command("unshare", append(args, "sleep", "3600")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{t: t, pid: cmd.Process.Pid}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	nsName := map[string]string{"mount": "mnt", "net": "net"}[kind]
	self, err := os.Readlink("/proc/self/ns/" + nsName)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "unshare --"+kind+" in its namespace", func() (bool, string) {
		got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", h.pid, nsName))
		return err == nil && got != self && strings.HasPrefix(filepath.Base(mustExe(h.pid)), "sleep"), fmt.Sprintf("%s (ours %s), %v", got, self, err)
	})
	return h
}

func mustExe(pid int) string {
	p, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return p
}

// wrap makes cmd run in h's mount namespace.
func (h *holder) wrap(cmd *exec.Cmd) {
	cmd.Args = append([]string{"nsenter", "-t", strconv.Itoa(h.pid), "-m", "--", cmd.Path}, cmd.Args[1:]...)
	cmd.Path, _ = exec.LookPath("nsenter")
}

// run runs a command in h's mount namespace and returns its output.
func (h *holder) run(args ...string) string {
	h.t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	if p, err := exec.LookPath(args[0]); err == nil {
		cmd.Path = p
	}
	h.wrap(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		h.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// devIno is a path's "device:inode" in h's mount namespace.
func (h *holder) devIno(path string) string { return h.run("stat", "-c", "%d:%i", path) }

// pluginIn runs the plugin's ADD in mnt's mount namespace for sandbox id of
// pod uid, whose netns is netns.
func (n *node) pluginIn(mnt *holder, id, uid, netns string) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBin())
	cmd.Env = []string{
		"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + netns, "CNI_IFNAME=eth0", "CNI_PATH=" + binDir,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-" + uid + ";K8S_POD_UID=" + uid + ";K8S_POD_INFRA_CONTAINER_ID=" + id,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
	mnt.wrap(cmd)
	cmd.Stdin = bytes.NewReader(n.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cniexec.Classify(cmd.Run(), stdout.Bytes(), stderr.Bytes(), 0)
}

// identityCase is one live sandbox "A" whose netns path is then gone from a
// directory with the recorded device and inode.
type identityCase struct {
	n   *node
	mnt *holder
	dir string // the netns directory, in mnt's view
	a   string // the live sandbox's ID
	ip  netip.Addr
}

// netnsChange is how the live sandbox's netns path disappears.
type netnsChange struct {
	name string
	// setup makes the netns directory in mnt's view and returns it.
	setup func(c *identityCase) string
	// change makes the netns path of the live sandbox vanish; it skips
	// the test when the kernel did not reuse the directory's numbers.
	change func(c *identityCase)
	// doubt is a part of the daemon's `leaks` detail for the sandbox.
	doubt string
}

var netnsChanges = []netnsChange{{
	name: "a new tmpfs in place of the old one",
	setup: func(c *identityCase) string {
		c.mnt.run("mount", "-t", "tmpfs", "hl-netns-old", c.n.netnsDir)
		return c.n.netnsDir
	},
	change: func(c *identityCase) {
		before := c.mnt.devIno(c.dir)
		c.mnt.run("umount", "-l", c.dir)
		c.mnt.run("mount", "-t", "tmpfs", "hl-netns-new", c.dir)
		if after := c.mnt.devIno(c.dir); after != before {
			c.n.t.Skipf("the new tmpfs is %s, the old one was %s: this kernel did not reuse the numbers", after, before)
		}
	},
	doubt: "a wrong mount",
}, {
	name: "the directory removed and created again on ext4",
	setup: func(c *identityCase) string {
		// A small ext4 of its own (one block group: a freed inode is the
		// next one given), loop-mounted in the private mount namespace;
		// the loop device goes with the mount.
		t := c.n.t
		if _, err := exec.LookPath("mkfs.ext4"); err != nil {
			t.Skipf("needs mkfs.ext4: %v", err)
		}
		img := filepath.Join(t.TempDir(), "ext4.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 16<<20); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
			t.Skipf("mkfs.ext4: %v: %s", err, out)
		}
		cmd := exec.Command("mount", "-o", "loop", img, c.n.netnsDir)
		c.mnt.wrap(cmd)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("no loop mount here: %v: %s", err, out)
		}
		dir := filepath.Join(c.n.netnsDir, "netns")
		c.mnt.run("mkdir", dir)
		return dir
	},
	change: func(c *identityCase) {
		before := c.mnt.devIno(c.dir)
		c.mnt.run("sh", "-ec", `umount "$0/cni-$1"; rm "$0/cni-$1"; rmdir "$0"; mkdir "$0"`, c.dir, c.a)
		if after := c.mnt.devIno(c.dir); after != before {
			c.n.t.Skipf("the new directory is %s, the old one was %s: ext4 did not reuse the inode here", after, before)
		}
	},
	doubt: "a wrong mount",
}, {
	name: "the netns path removed while the namespace lives",
	setup: func(c *identityCase) string {
		c.mnt.run("mount", "-t", "tmpfs", "hl-netns", c.n.netnsDir)
		return c.n.netnsDir
	},
	change: func(c *identityCase) {
		c.mnt.run("sh", "-ec", `umount "$0/cni-$1"; rm "$0/cni-$1"`, c.dir, c.a)
	},
	doubt: "still held by a process or a mount",
}}

// newIdentityCase makes a node with size addresses, a private mount
// namespace with the netns directory, and sandbox A: a process in its own
// network namespace (bind-mounted at the netns path, as a runtime does),
// given its address by the plugin's ADD and configured with it; then the
// netns path vanishes (ch.change).
func newIdentityCase(t *testing.T, size int, ch netnsChange) *identityCase {
	needRealNetns(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skipf("needs nsenter: %v", err)
	}
	c := &identityCase{n: newNode(t, size), a: "live-a"}
	c.mnt = startHolder(t, "mount", "--propagation", "private")
	c.dir = ch.setup(c)
	sb := startHolder(t, "net")
	path := filepath.Join(c.dir, "cni-"+c.a)
	c.mnt.run("sh", "-ec", `touch "$0" && mount --bind "/proc/$1/ns/net" "$0"`, path, strconv.Itoa(sb.pid))
	o := c.n.pluginIn(c.mnt, c.a, "uid-a", path)
	if !o.OK() {
		t.Fatalf("ADD %s: %s", c.a, o)
	}
	ip, err := resultIP(o.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	c.ip = ip
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(sb.pid), "-n", "ip", "addr", "add", ip.String()+"/24", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("configuring %s in the sandbox: %v: %s", ip, err, out)
	}
	ch.change(c)
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(sb.pid), "-n", "ip", "-o", "addr", "show", "dev", "lo").CombinedOutput(); err != nil || !strings.Contains(string(out), ip.String()) {
		t.Fatalf("the sandbox no longer has %s: %v: %s", ip, err, out)
	}
	return c
}

// held checks that A still holds its address and that the plugin released
// nothing.
func (c *identityCase) held(t *testing.T) {
	t.Helper()
	if r, ok := c.n.records()[c.a]; !ok || r.IP != c.ip {
		t.Errorf("the live sandbox's record is gone (its address %s is in use in its namespace): records %v", c.ip, c.n.records())
	}
	for _, ev := range c.n.audit() {
		if ev.ContainerID == c.a && ev.Action == allocator.AuditRelease {
			t.Errorf("the live sandbox was released: %+v", ev)
		}
	}
}

// The plugin's exhaustion ADD: the live sandbox holds the only address; an
// ADD of another pod must fail with "no free address", not take it.
func TestReusedIdentityExhaustionAdd(t *testing.T) {
	for _, ch := range netnsChanges {
		t.Run(ch.name, func(t *testing.T) {
			c := newIdentityCase(t, 1, ch)
			path := filepath.Join(c.dir, "cni-b")
			c.mnt.run("touch", path)
			o := c.n.pluginIn(c.mnt, "b", "uid-b", path)
			if o.OK() || o.Err == nil || o.Err.Code != 100 {
				t.Errorf("ADD of another pod on a pool whose only address a live sandbox holds: %s; want code 100", o)
			}
			c.held(t)
		})
	}
}

// The plugin's ADD of the same pod (a new sandbox of pod uid-a): the live
// sandbox's record stays.
func TestReusedIdentitySamePodAdd(t *testing.T) {
	for _, ch := range netnsChanges {
		t.Run(ch.name, func(t *testing.T) {
			c := newIdentityCase(t, 4, ch)
			path := filepath.Join(c.dir, "cni-a2")
			c.mnt.run("touch", path)
			if o := c.n.pluginIn(c.mnt, "a2", "uid-a", path); !o.OK() {
				t.Fatalf("ADD of the pod's new sandbox: %s", o)
			}
			c.held(t)
		})
	}
}

// The daemon's sweep, in the same mount namespace, with the netns directory
// as --netns-dir and CRI not listing the sandbox: no netns_gone reclaim, and
// `leaks` says why.
func TestReusedIdentityDaemonSweep(t *testing.T) {
	for _, ch := range netnsChanges {
		t.Run(ch.name, func(t *testing.T) {
			c := newIdentityCase(t, 4, ch)
			args := append(c.n.baseFlags(), append([]string{"--netns-dir", c.dir}, noProofRules...)...)
			p, err := gcproc.Start(gcBin(), args, c.mnt.wrap)
			if err != nil {
				t.Fatal(err)
			}
			d := &daemon{Daemon: p, t: t, logs: daemonLog{p}}
			t.Cleanup(func() {
				d.Stop()
				if t.Failed() {
					t.Logf("hostlease-gc log:\n%s", strings.Join(d.Lines(), "\n"))
				}
			})
			eventually(t, "three sweeps", func() (bool, string) {
				v := d.scrape().sweeps()
				return v >= 3, fmt.Sprintf("sweeps %v", v)
			})
			if v := reclaimsOf(d.scrape(), "netns_gone"); v != 0 {
				t.Errorf("reclaims{netns_gone} %v: the live sandbox was reclaimed", v)
			}
			c.held(t)

			cmd := exec.Command(gcBin(), append([]string{"leaks", "--all", "--cri-endpoint", c.n.cri.Endpoint(), "--data-dir", c.n.dataDir,
				"--netns-dir", c.dir, "--no-api", "-o", "json"}, noProofRules...)...)
			c.mnt.wrap(cmd)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("hostlease-gc leaks: %v", err)
			}
			if !strings.Contains(string(out), ch.doubt) {
				t.Errorf("leaks does not say %q of the live sandbox:\n%s", ch.doubt, out)
			}
		})
	}
}
