package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A --data-dir that does not exist sweeps nothing: the daemon says so in
// its log (once, not every sweep), in hostlease_data_dir_ok and in /readyz
// (503 with why). An empty one is ready and says why; one holding a store
// is ok, and the log says so when it comes back.
func TestDaemonReportsMissingDataDir(t *testing.T) {
	d, e, logs := newTestDaemon(t)
	good := d.Sweeper.Opts.DataDir
	typo := filepath.Join(t.TempDir(), "hostleaes")
	d.Sweeper.Opts.DataDir = typo
	h := d.Handler()
	d.sweep(context.Background(), "test")
	d.sweep(context.Background(), "test")
	code, body := get(t, h, "/readyz")
	if code != 200 || !strings.Contains(body, "--data-dir "+typo+" does not exist") {
		t.Errorf("/readyz with a missing data dir: %d %q, want 200 saying why (a node before its first ADD)", code, body)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d.Sweeper.Opts.DataDir = notDir
	d.sweep(context.Background(), "test")
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "is not a directory") {
		t.Errorf("/readyz with a data dir that is a file: %d %q, want 503 saying why", code, body)
	}
	d.Sweeper.Opts.DataDir = typo
	d.sweep(context.Background(), "test")
	if _, m := get(t, h, "/metrics"); !strings.Contains(m, "\nhostlease_data_dir_ok 0\n") {
		t.Errorf("/metrics with a missing data dir lacks hostlease_data_dir_ok 0")
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"data dir missing\""); n != 3 {
		t.Errorf("want one warning per change (missing, a file, missing again) over four sweeps, got %d:\n%s", n, logs)
	}

	empty := t.TempDir()
	d.Sweeper.Opts.DataDir = empty
	d.sweep(context.Background(), "test")
	if code, body := get(t, h, "/readyz"); code != 200 || !strings.Contains(body, "holds no store yet") {
		t.Errorf("/readyz with an empty data dir: %d %q, want 200 saying it is empty", code, body)
	}
	if !strings.Contains(logs.String(), `msg="data dir empty"`) {
		t.Errorf("no log line for the empty data dir:\n%s", logs)
	}

	d.Sweeper.Opts.DataDir = good
	e.alloc("sb-1", t0.Add(-time.Hour))
	d.sweep(context.Background(), "test")
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz with a store: %d %q", code, body)
	}
	if _, m := get(t, h, "/metrics"); !strings.Contains(m, "\nhostlease_data_dir_ok 1\n") {
		t.Errorf("/metrics with a store lacks hostlease_data_dir_ok 1")
	}
	if !strings.Contains(logs.String(), `msg="data dir holds stores"`) {
		t.Errorf("no log line when the data dir holds stores again:\n%s", logs)
	}
}
