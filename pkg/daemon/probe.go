package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// The probe socket serves /healthz and /readyz on a unix socket, for the
// DaemonSet's exec probes (`hostlease-gc probe`). On the TCP listener the
// kubelet's probes come from the node's address, which every hostNetwork pod
// shares: a flood from that address can close a probe's connection before
// its header is read (connCap sheds within an address, and cannot tell the
// kubelet from the flood). The socket lives in the pod's own emptyDir, where
// no other pod can connect, so the kubelet's probes never compete with
// anyone.

// Probe-socket server bounds: the only client is the exec probe, which sends
// one small request and reads a few bytes.
const (
	probeReadTimeout  = 5 * time.Second
	probeWriteTimeout = 5 * time.Second
	probeIdleTimeout  = 10 * time.Second
	probeHeaderBytes  = 4 << 10
)

// maxSunPath is the longest path a unix socket address holds (sun_path is
// 108 bytes with its terminating NUL).
const maxSunPath = len(unix.RawSockaddrUnix{}.Path) - 1

// probeDialTimeout bounds the connect that tells a live socket at the path
// from one an earlier run left.
const probeDialTimeout = time.Second

// listenProbeSocket listens on the unix socket at path, by the trustfs
// contract (nothing the node can change is trusted):
//
//   - The socket's directory is opened with trustfs (its last component
//     never a symlink; owned by this user or root, not writable by group or
//     others). When it is missing it is created 0700 with mkdir(2), which
//     never replaces anything, and then opened and checked like any other:
//     a directory someone else made there first is refused, never used, so
//     whoever can write its parent (the DaemonSet's /tmp emptyDir is 1777)
//     can at worst make the daemon refuse to start, never redirect it. Its
//     ancestors are resolved as any path is: they are the operator's.
//   - Once the directory is open nothing is done by its path: the name is
//     looked at (fstatat), a stale socket removed (unlinkat), and the socket
//     bound through /proc/self/fd/<dirfd>/<name>, all relative to the
//     descriptor, so the directory renamed or swapped for a symlink after
//     the check is never entered.
//   - Only a socket at the name that nothing answers on (an earlier run,
//     killed before it removed it) is removed; a socket a live process
//     serves, a file, a directory, a symlink or anything else is refused and
//     left as it is. bind(2) never replaces a name, so whatever appears
//     there between the removal and the bind makes the bind fail.
//   - Closing the listener removes the name only while it is still the
//     socket this listener bound (same device, inode and change time,
//     relative to the directory's descriptor), then closes the directory.
//
// The probe client connects by path: path must fit in a socket address.
func listenProbeSocket(path string) (net.Listener, error) {
	dir, name, err := openProbeDir(path)
	if err != nil {
		return nil, err
	}
	ln, err := listenProbeIn(dir, name, path)
	if err != nil {
		dir.Close()
		return nil, err
	}
	return ln, nil
}

// openProbeDir opens and checks (creating it 0700 when missing) the
// directory of the socket path, and returns it with the socket's name in it.
func openProbeDir(path string) (*trustfs.Dir, string, error) {
	clean := filepath.Clean(path)
	name := filepath.Base(clean)
	switch {
	case path == "":
		return nil, "", errors.New("--probe-socket: empty path")
	case len(path) > maxSunPath:
		return nil, "", fmt.Errorf("--probe-socket %s: %d bytes, longer than a unix socket address holds (%d)", path, len(path), maxSunPath)
	case name == "." || name == ".." || name == "/":
		return nil, "", fmt.Errorf("--probe-socket %s: want a path naming the socket in its directory (such as /tmp/probe/probe.sock)", path)
	}
	parent := filepath.Dir(clean)
	dir, err := trustfs.MkdirOpen(parent, 0o700)
	if trustfs.IsUntrusted(err) {
		// A shared directory such as /tmp is no place for it; one of its
		// own there is.
		return nil, "", fmt.Errorf("--probe-socket %s: its directory: %w; or give the socket a directory of its own, such as %s, which the daemon creates 0700", path, err, filepath.Join(parent, "hostlease-probe", name))
	}
	if err != nil {
		return nil, "", fmt.Errorf("--probe-socket %s: its directory: %w", path, err)
	}
	return dir, name, nil
}

// listenProbeIn binds the socket name in dir (path names it in errors and
// is where clients connect), replacing only a stale socket of an earlier
// run. The listener owns dir: its Close closes it.
func listenProbeIn(dir *trustfs.Dir, name, path string) (net.Listener, error) {
	// The address relative to the descriptor: /proc/self/fd/<fd> is the
	// opened directory itself, whatever its path names now.
	at := "/proc/self/fd/" + strconv.Itoa(dir.Fd()) + "/" + name
	if len(at) > maxSunPath {
		return nil, fmt.Errorf("--probe-socket %s: the name %q is too long for a socket address bound relative to its directory (%d bytes, at most %d)", path, name, len(at), maxSunPath)
	}
	st, err := dir.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return nil, fmt.Errorf("--probe-socket %s exists and is not a socket (%s): refusing to replace it", path, trustfs.TypeName(st.Mode))
	default:
		if live, err := socketAnswers(at); live || err != nil {
			if err == nil {
				err = errors.New("a running process accepts connections on it")
			}
			return nil, fmt.Errorf("--probe-socket %s: refusing to replace the socket there: %w", path, err)
		}
		if err := dir.Remove(name); err != nil {
			return nil, fmt.Errorf("--probe-socket %s: removing the socket of an earlier run: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", at)
	if err != nil {
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	// Go would unlink by the address, whatever is there then.
	ul.SetUnlinkOnClose(false)
	bound, err := dir.Lstat(name)
	if err != nil || bound.Mode&unix.S_IFMT != unix.S_IFSOCK {
		ul.Close()
		if err == nil {
			err = fmt.Errorf("%s is there instead of the socket just bound", trustfs.TypeName(bound.Mode))
		}
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	}
	return &probeListener{UnixListener: ul, dir: dir, name: name, bound: fileID(&bound)}, nil
}

// socketAnswers reports whether a process accepts connections on the socket
// at addr: false for a socket nothing listens on (ECONNREFUSED), an error
// when that cannot be told.
func socketAnswers(addr string) (bool, error) {
	c, err := net.DialTimeout("unix", addr, probeDialTimeout)
	if err == nil {
		c.Close()
		return true, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false, nil
	}
	return false, err
}

// fileIdentity tells a file from one created later at the same name: an
// inode number is reused once its file is gone, its change time with it
// only by a coincidence of the clock.
type fileIdentity struct {
	dev, ino   uint64
	mode       uint32
	ctim, ctns int64
}

func fileID(st *unix.Stat_t) fileIdentity {
	return fileIdentity{dev: uint64(st.Dev), ino: uint64(st.Ino), mode: st.Mode & unix.S_IFMT, ctim: int64(st.Ctim.Sec), ctns: int64(st.Ctim.Nsec)}
}

// probeListener is the probe socket's listener: Close removes the socket's
// name, relative to its directory's descriptor, only while it is still the
// socket bound (fileIdentity), and closes the directory.
type probeListener struct {
	*net.UnixListener
	dir   *trustfs.Dir
	name  string
	bound fileIdentity
	once  sync.Once
	err   error
}

func (l *probeListener) Close() error {
	l.once.Do(func() {
		if st, err := l.dir.Lstat(l.name); err == nil && fileID(&st) == l.bound {
			_ = l.dir.Remove(l.name)
		}
		l.err = l.UnixListener.Close()
		l.dir.Close()
	})
	return l.err
}

// newProbeServer returns the server of the probe socket: /healthz and
// /readyz only, as the TCP listener answers them.
func (d *Daemon) newProbeServer() *http.Server {
	mux := http.NewServeMux()
	d.handleProbes(mux)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: probeReadTimeout,
		ReadTimeout:       probeReadTimeout,
		WriteTimeout:      probeWriteTimeout,
		IdleTimeout:       probeIdleTimeout,
		MaxHeaderBytes:    probeHeaderBytes,
	}
}
