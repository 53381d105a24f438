package daemon

import (
	"bytes"
	"context"
	"errors"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncBuffer is a log sink the daemon goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newTestDaemon(t *testing.T, mods ...func(*Options)) (*Daemon, *sweepEnv, *syncBuffer) {
	t.Helper()
	e := newSweepEnv(t, mods...)
	logs := &syncBuffer{}
	e.s.Log = slog.New(slog.NewTextHandler(logs, nil))
	return &Daemon{Sweeper: e.s, Registry: e.reg, kickPoll: 10 * time.Millisecond}, e, logs
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestDaemonHandler(t *testing.T) {
	d, e, _ := newTestDaemon(t, func(o *Options) { o.Interval = time.Second })
	live := e.alloc("sb-live", t0.Add(-time.Hour))
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	h := d.Handler()

	// Starting up: alive, not ready, metrics served.
	if code, body := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before the first sweep: %d %q", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "CRI") {
		t.Fatalf("/readyz before the first sweep: %d %q, want 503 naming CRI", code, body)
	}
	code, body := get(t, h, "/metrics")
	if code != http.StatusOK || !strings.Contains(body, "hostlease_build_info{") || !strings.Contains(body, `hostlease_sweeps_total{result="ok"} 0`) {
		t.Fatalf("/metrics before the first sweep: %d\n%s", code, body)
	}

	// A sweep that cannot reach CRI: alive, still not ready.
	e.cri.setListErr(errors.New("connection refused"))
	d.sweep(context.Background(), "test")
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz after a finished (failed) sweep: %d", code)
	}
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after a sweep that did not reach CRI: %d, want 503", code)
	}
	if _, body := get(t, h, "/metrics"); !strings.Contains(body, "\nhostlease_cri_up 0\n") || !strings.Contains(body, `hostlease_sweeps_total{result="cri_error"} 1`) {
		t.Fatalf("/metrics after a CRI failure lacks cri_up 0 / sweeps cri_error 1:\n%s", body)
	}

	// CRI answers: ready, and the network's gauges are exported.
	e.cri.setListErr(nil)
	d.sweep(context.Background(), "test")
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz after a sweep reached CRI: %d %q", code, body)
	}
	_, body = get(t, h, "/metrics")
	for _, line := range []string{
		"hostlease_cri_up 1",
		`hostlease_sweeps_total{result="ok"} 1`,
		`hostlease_pool_size_addresses{network="podnet",range_set="0"} 191`,
		`hostlease_pool_free_addresses{network="podnet",range_set="0"} 190`,
		`hostlease_allocations{network="podnet",state="committed"} 1`,
		`hostlease_leak_candidates{network="podnet"} 0`,
		`hostlease_reclaims_total{network="podnet",reason="sandbox_absent"} 0`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
	// Ready stays ready through a later CRI failure: /readyz gates the first
	// contact only; cri_up and the alerts report outages.
	e.cri.setListErr(errors.New("down"))
	d.sweep(context.Background(), "test")
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after a later CRI failure: %d", code)
	}

	// A wedged loop: no sweep for three intervals plus two CRI timeouts.
	limit := 3*d.Sweeper.Opts.Interval + 2*criTimeout
	d.lastSweep.Store(time.Now().Add(-limit - 2*time.Second).UnixNano())
	if code, body := get(t, h, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no sweep finished") {
		t.Fatalf("/healthz with the last sweep %s ago: %d %q, want 503", limit+2*time.Second, code, body)
	}
	d.lastSweep.Store(time.Now().Add(-limit + 2*time.Second).UnixNano())
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the last sweep just within the limit: %d", code)
	}
	if code, _ := get(t, h, "/nope"); code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", code)
	}
}

// runDaemon starts d.Run and returns a stop function that waits for it.
func runDaemon(t *testing.T, d *Daemon) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(hangGuard):
				err = errors.New("hung: Run did not return after its context was cancelled")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// hangGuard bounds every wait in this package's daemon tests. It is a guard
// against a hung test, never an assertion about how long something takes.
const hangGuard = 2 * time.Minute

// waitFor waits until cond holds and returns how long that took (for logs
// only); a wait beyond hangGuard fails the test as hung.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > hangGuard {
			t.Fatalf("hung: no %s after %s", what, hangGuard)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func touch(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonKickSweepsAtOnce(t *testing.T) {
	d, e, _ := newTestDaemon(t, func(o *Options) { o.Interval = time.Hour })
	kick := filepath.Join(e.dir, ".kick")
	// A kick left over from before the daemon started is not a new event.
	touch(t, kick, time.Now().Add(-time.Minute))
	var polls atomic.Int64
	d.kickPolled = func() { polls.Add(1) }
	// tenPolls waits until the daemon has looked at the kick file ten more
	// times: a sweep a kick would cause has happened by then.
	tenPolls := func() {
		t.Helper()
		p := polls.Load()
		waitFor(t, "ten looks at the kick file", func() bool { return polls.Load() >= p+10 })
	}
	stop := runDaemon(t, d)

	waitFor(t, "the start-up sweep", func() bool { return e.cri.lists.Load() == 1 })
	tenPolls()
	if n := e.cri.lists.Load(); n != 1 {
		t.Fatalf("%d sweeps without a new kick, want only the start-up one", n)
	}

	for i := 2; i <= 3; i++ {
		touch(t, kick, time.Now().Add(time.Duration(i)*time.Second))
		took := waitFor(t, "a sweep after the kick", func() bool { return e.cri.lists.Load() == int64(i) })
		t.Logf("kick %d answered after %s (poll %s)", i-1, took, d.kickPoll)
		tenPolls()
		if n := e.cri.lists.Load(); n != int64(i) {
			t.Fatalf("one kick caused %d sweeps", n-int64(i-1))
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := e.metric("hostlease_sweeps_total", "result", SweepOK); got != 3 {
		t.Fatalf("sweeps{ok} = %v, want 3", got)
	}
}

// A plugin that finds the pool exhausted touches .kick; the daemon reclaims
// the leaks at once instead of at the next interval.
func TestDaemonKickReclaimsOnExhaustion(t *testing.T) {
	d, e, _ := newTestDaemon(t, func(o *Options) { o.Interval = time.Hour; o.Misses = 1; o.Grace = 0 })
	leak := e.alloc("sb-leaked", t0.Add(-time.Hour))
	stop := runDaemon(t, d)
	// Misses=1 and no grace: the start-up sweep already reclaims; wait for it
	// and leak another one afterwards.
	waitFor(t, "the start-up sweep", func() bool { return e.metric("hostlease_sweeps_total", "result", SweepOK) == 1 })
	if e.records()[leak.IP] != nil {
		t.Fatal("start-up sweep did not reclaim the first leak")
	}
	leak2 := e.alloc("sb-leaked-2", t0.Add(-time.Hour))
	touch(t, filepath.Join(e.dir, ".kick"), time.Now().Add(time.Second))
	waitFor(t, "the kicked sweep to reclaim", func() bool {
		return e.metric("hostlease_reclaims_total", "network", testNet, "reason", reclaim.ReleaseSandboxAbsent) == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e.records()[leak2.IP] != nil {
		t.Fatal("the kicked sweep's reclaim is not in the store")
	}
}

func TestDaemonRunServesAndStops(t *testing.T) {
	d, e, logs := newTestDaemon(t, func(o *Options) { o.Interval = 20 * time.Millisecond; o.MetricsAddr = "127.0.0.1:0" })
	closed := make(chan struct{})
	d.Sweeper.CRI = &closeNotifyCRI{CRI: e.cri, closed: closed}
	stop := runDaemon(t, d)

	waitFor(t, "interval sweeps", func() bool { return e.cri.lists.Load() >= 3 })
	var addr string
	waitFor(t, "the metrics listener", func() bool {
		m := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`).FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	for path, want := range map[string]int{"/metrics": 200, "/healthz": 200, "/readyz": 200} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		if path == "/metrics" && !bytes.Contains(b, []byte("hostlease_sweeps_total")) {
			t.Errorf("GET /metrics lacks hostlease_sweeps_total")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	default:
		t.Error("Run returned without closing the CRI connection")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("metrics server still serving after Run returned")
	}
}

type closeNotifyCRI struct {
	CRI
	closed chan struct{}
	once   sync.Once
}

func (c *closeNotifyCRI) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.CRI.Close()
}

// NewDaemon against a runtime socket that does not exist: the daemon starts,
// reports CRI down and is not ready; bad flags are refused up front.
func TestNewDaemonWithoutRuntime(t *testing.T) {
	dir := t.TempDir()
	o := &Options{CRIEndpoint: "unix://" + filepath.Join(dir, "no.sock"), DataDir: dir, Interval: time.Hour, Misses: 3,
		Grace: 2 * time.Minute, MinAge: 5 * time.Minute, NetnsGrace: 30 * time.Second, MaxReclaimFraction: 0.5,
		NoAPI: true, LogFormat: "text", NetnsDir: dir, HTTP: HTTPLimits{}.withDefaults()}
	d, err := NewDaemon(o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if d.kickPoll <= 0 || d.kickPoll > 5*time.Second {
		t.Fatalf("kick poll %s: an exhaustion would wait too long for a sweep", d.kickPoll)
	}
	d.sweep(context.Background(), "test")
	h := d.Handler()
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz without a runtime: %d", code)
	}
	_, body := get(t, h, "/metrics")
	for _, line := range []string{"hostlease_cri_up 0", `hostlease_sweeps_total{result="cri_error"} 1`} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if !strings.Contains(body, "\ngo_goroutines ") {
		t.Errorf("/metrics lacks the Go runtime collectors")
	}
	d.Sweeper.CRI.Close()

	bad := *o
	bad.MaxReclaimFraction = 0
	if _, err := NewDaemon(&bad, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "--max-reclaim-fraction") {
		t.Fatalf("NewDaemon with --max-reclaim-fraction 0: %v", err)
	}
	noNode := *o
	noNode.NoAPI = false
	noNode.NodeName = ""
	if _, err := NewDaemon(&noNode, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Fatalf("NewDaemon without --node-name: %v", err)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
