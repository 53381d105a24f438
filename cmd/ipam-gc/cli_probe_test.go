package main

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// serveUnix answers every request on a unix socket with code and body.
func serveUnix(t *testing.T, code int, body string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "probe.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(r.URL.Path + " " + body))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

// probe: exit 0 and the answer on stdout for a yes, 1 and the answer on
// stderr for a no or no answer, 2 for a bad command line.
func TestProbe(t *testing.T) {
	yes := serveUnix(t, http.StatusOK, "ok")
	out, errOut, code := cli(t, "probe", "readyz", "--socket", yes)
	if code != exitOK || out != "/readyz ok" || errOut != "" {
		t.Errorf("probe readyz on a ready daemon: exit %d, stdout %q, stderr %q; want 0 and the answer", code, out, errOut)
	}
	no := serveUnix(t, http.StatusServiceUnavailable, "no sweep has reached CRI yet")
	out, errOut, code = cli(t, "probe", "healthz", "--socket", no)
	if code != exitFailed || out != "" || !strings.Contains(errOut, "healthz: 503 /healthz no sweep has reached CRI yet") {
		t.Errorf("probe healthz answered 503: exit %d, stdout %q, stderr %q; want 1 naming the answer", code, out, errOut)
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	if _, errOut, code := cli(t, "probe", "healthz", "--socket", missing); code != exitFailed || !strings.Contains(errOut, missing) {
		t.Errorf("probe with no daemon: exit %d, stderr %q; want 1 naming the socket", code, errOut)
	}
	for _, args := range [][]string{
		{"probe", "--socket", yes},
		{"probe", "metrics", "--socket", yes},
		{"probe", "healthz", "readyz", "--socket", yes},
		{"probe", "healthz"},
		{"probe", "healthz", "--socket", yes, "--timeout", "0s"},
	} {
		if _, errOut, code := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, strings.TrimSpace(errOut), exitUsage)
		}
	}
}
