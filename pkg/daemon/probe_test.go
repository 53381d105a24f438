package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	sock := filepath.Join(t.TempDir(), "probe.sock")
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

// A socket an earlier run left at the path is replaced; anything else there
// is refused and left as it is.
func TestProbeSocketPath(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	old, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close() // a killed daemon leaves its socket file
	ln, err := listenProbeSocket(stale)
	if err != nil {
		t.Fatalf("a stale socket at the path: %v; want it replaced", err)
	}
	ln.Close()
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after the listener closed (%v)", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(stale, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link, dir} {
		if ln, err := listenProbeSocket(p); err == nil {
			ln.Close()
			t.Errorf("listenProbeSocket(%s) succeeded; want it refused", p)
		} else if !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("listenProbeSocket(%s): %v; want it named as not a socket", p, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the file at the path was touched: %q %v", b, err)
	}
	if _, err := os.Readlink(link); err != nil {
		t.Errorf("the symlink at the path was touched: %v", err)
	}
}
