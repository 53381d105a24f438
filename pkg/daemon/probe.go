package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"
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

// listenProbeSocket listens on the unix socket at path. A socket left there
// by an earlier run of the daemon (killed before it removed it) is replaced;
// anything else at path (a file, a directory, a symlink) is refused, never
// removed.
func listenProbeSocket(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("--probe-socket %s exists and is not a socket (%s): refusing to replace it", path, fi.Mode().Type())
	default:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--probe-socket %s: removing the socket of an earlier run: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return ln, nil
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
