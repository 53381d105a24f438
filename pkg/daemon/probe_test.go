package daemon

import (
	"context"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// getUnix makes one GET of path on the unix socket.
func getUnix(t *testing.T, socket, path string) (int, string) {
	t.Helper()
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Get("http://probe" + path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, socket, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The probe socket answers /healthz and /readyz as the TCP listener does,
// and nothing else.
func TestProbeSocketServesProbesOnly(t *testing.T) {
	d := &Daemon{Sweeper: &Sweeper{Opts: &Options{Interval: MinInterval}}}
	sock := filepath.Join(t.TempDir(), "probe", "probe.sock")
	ln, err := listenProbeSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := d.newProbeServer()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if code, body := getUnix(t, sock, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	if code, body := getUnix(t, sock, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no sweep") {
		t.Errorf("/readyz before any sweep = %d %q, want 503 naming the missing sweep", code, body)
	}
	d.ready.Store(true)
	if code, _ := getUnix(t, sock, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after a sweep reached CRI = %d, want 200", code)
	}
	if code, _ := getUnix(t, sock, "/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the probe socket = %d, want 404", code)
	}
}

// staleSocket leaves at path the socket file of a killed daemon: nothing
// answers on it.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
}

// A socket an earlier run left at the path is replaced, and closing the
// listener removes the socket it bound and nothing else.
func TestProbeSocketReplacesStale(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "probe.sock")
	staleSocket(t, sock)
	ln, err := listenProbeSocket(sock)
	if err != nil {
		t.Fatalf("a stale socket at the path: %v; want it replaced", err)
	}
	// The stale socket refused connections; the new one accepts them.
	if c, err := net.Dial("unix", sock); err != nil {
		t.Fatalf("connecting to the replaced socket: %v", err)
	} else {
		c.Close()
	}
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after the listener closed (%v)", err)
	}
	if _, err := os.Lstat(keep); err != nil {
		t.Errorf("closing removed more than its socket: %v", err)
	}
	if err := ln.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// Closing the listener removes the name only while it is the socket it
// bound: a socket another run put there since, or a file, stays.
func TestProbeSocketCloseRemovesOnlyItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"another socket", staleSocket},
		{"a file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "probe.sock")
			ln, err := listenProbeSocket(sock)
			if err != nil {
				t.Fatal(err)
			}
			// Ours moves away (kept, so its inode is not reused) and
			// something else takes the name.
			if err := os.Rename(sock, sock+".ours"); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, sock)
			planted, err := os.Lstat(sock)
			if err != nil {
				t.Fatal(err)
			}
			ln.Close()
			if now, err := os.Lstat(sock); err != nil || !os.SameFile(planted, now) {
				t.Errorf("closing the listener removed %s it did not bind (%v)", tc.name, err)
			}
		})
	}
}

// Anything at the path but a stale socket is refused and left as it is: a
// file, a directory, a symlink (to a socket, to a directory), a socket a
// live process serves.
func TestProbeSocketRefusesWhatIsNotStale(t *testing.T) {
	dir := t.TempDir()
	target := t.TempDir()
	stale := filepath.Join(target, "stale.sock")
	staleSocket(t, stale)
	live := filepath.Join(target, "live.sock")
	liveLn, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer liveLn.Close()
	for _, tc := range []struct {
		name, want string
		plant      func(path string) error
	}{
		{"a regular file", "not a socket (a regular file)", func(p string) error { return os.WriteFile(p, []byte("keep"), 0o600) }},
		{"a directory", "not a socket (a directory)", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"a symlink to a socket", "not a socket (a symlink)", func(p string) error { return os.Symlink(stale, p) }},
		{"a symlink to a directory", "not a socket (a symlink)", func(p string) error { return os.Symlink(target, p) }},
		{"a live socket", "a running process accepts connections", func(p string) error { return os.Link(live, p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := tc.plant(p); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if ln, err := listenProbeSocket(p); err == nil {
				ln.Close()
				t.Fatalf("listenProbeSocket(%s) succeeded; want it refused", p)
			} else if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("listenProbeSocket(%s): %v; want %q", p, err, tc.want)
			}
			if now, err := os.Lstat(p); err != nil || !os.SameFile(before, now) {
				t.Errorf("%s at the path was touched: %v", tc.name, err)
			}
		})
	}
	if fi, err := os.Lstat(stale); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("the link's target was touched: %v %v", fi, err)
	}
	if c, err := net.Dial("unix", live); err != nil {
		t.Errorf("the live socket no longer answers: %v", err)
	} else {
		c.Close()
	}
}

// The socket's directory is held to the trustfs contract: a symlink, a
// directory writable by group or others (such as /tmp itself) or owned by
// another user is refused, and nothing is created in it; a missing one is
// created 0700.
func TestProbeSocketDirectory(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	mkdir := func(name string, mode os.FileMode) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"a symlink to a directory", link, "is a symlink"},
		{"a dangling symlink", func() string {
			p := filepath.Join(root, "dangling")
			if err := os.Symlink(filepath.Join(root, "nowhere"), p); err != nil {
				t.Fatal(err)
			}
			return p
		}(), "is a symlink"},
		{"group-writable", mkdir("group", 0o770), "writable by group"},
		{"other-writable", mkdir("other", 0o707), "writable by others"},
		{"world-writable and sticky", mkdir("sticky", 0o1777), "writable by group and others"},
		{"a regular file", func() string {
			p := filepath.Join(root, "file")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}(), "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := listenProbeSocket(filepath.Join(tc.dir, "probe.sock"))
			if err == nil {
				ln.Close()
				t.Fatalf("a socket in %s was bound; want its directory refused", tc.name)
			}
			if !trustfs.IsUntrusted(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "a directory of its own") {
				t.Errorf("%s: %v; want a trustfs refusal saying %q and naming the fix", tc.name, err, tc.want)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(real, "probe.sock")); !os.IsNotExist(err) {
		t.Errorf("something was created through the symlink (%v)", err)
	}
	if os.Geteuid() == 0 {
		other := mkdir("owned", 0o700)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if ln, err := listenProbeSocket(filepath.Join(other, "probe.sock")); err == nil {
			ln.Close()
			t.Errorf("a socket in a directory uid 65534 owns was bound; want it refused")
		} else if !trustfs.IsUntrusted(err) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("a directory uid 65534 owns: %v; want it refused as owned by another user", err)
		}
	}

	// A missing directory is created 0700 in its parent, even in one anyone
	// may write (the DaemonSet's /tmp emptyDir): the new directory is what
	// is checked.
	open := mkdir("open", 0o777)
	sock := filepath.Join(open, "probe", "probe.sock")
	ln, err := listenProbeSocket(sock)
	if err != nil {
		t.Fatalf("a missing directory in a world-writable parent: %v; want it created", err)
	}
	defer ln.Close()
	fi, err := os.Lstat(filepath.Dir(sock))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the socket's directory: %v %v; want a directory of mode 0700", fi, err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("the socket: %v %v", fi, err)
	}
}

// The socket is bound in the directory that was opened and checked: the
// directory renamed away and its path made a symlink to another directory
// between the check and the bind does not move the socket there (a bind by
// path would follow the link into the other directory).
func TestProbeSocketBindsInTheOpenedDirectory(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "probe", "probe.sock")
	dir, name, err := openProbeDir(path)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(root, "moved")
	if err := os.Rename(filepath.Dir(path), moved); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	ln, err := listenProbeIn(dir, name, path)
	if err != nil {
		dir.Close()
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(moved, name)); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("no socket in the directory that was opened (now %s): %v %v", moved, fi, err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, name)); !os.IsNotExist(err) {
		t.Errorf("the socket was bound through the symlink in %s (%v); want it in the opened directory", elsewhere, err)
	}
	ln.Close()
	if _, err := os.Lstat(filepath.Join(moved, name)); !os.IsNotExist(err) {
		t.Errorf("closing left the socket in the opened directory (%v)", err)
	}
}

// The path must fit a socket address: the probe client connects by it.
func TestProbeSocketPathLength(t *testing.T) {
	long := "/" + strings.Repeat("d", maxSunPath) + "/probe.sock"
	if ln, err := listenProbeSocket(long); err == nil {
		ln.Close()
		t.Fatal("a path longer than sun_path was accepted")
	} else if !strings.Contains(err.Error(), "longer than a unix socket address holds") {
		t.Errorf("a path longer than sun_path: %v", err)
	}
	for _, p := range []string{"", "/"} {
		if ln, err := listenProbeSocket(p); err == nil {
			ln.Close()
			t.Errorf("listenProbeSocket(%q) succeeded", p)
		}
	}
}
