package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/promtext"
)

// DaemonOptions say how to run `hostlease-gc run` against an env.
type DaemonOptions struct {
	// DataDir is the plugin's store dir (the ipam "dataDir"); required.
	DataDir string
	// Args are more flags, e.g. "--interval", "1s", "--misses", "2". The
	// helper always passes --cri-endpoint (the env's), --data-dir,
	// --metrics-addr 127.0.0.1:0 (a free port), --no-api, --log-format json
	// and --netns-dir (the env's netns dir, where containerd puts the pods'
	// network namespaces, as /var/run/netns on a node); a flag given again
	// in Args wins, as the flag package keeps the last value.
	Args []string
	// ReadyTimeout bounds the wait for /readyz (default 30s).
	ReadyTimeout time.Duration
}

// Daemon is one hostlease-gc process serving an env. Its log (JSON lines) is
// kept in LogPath across Stop/Start; t.Cleanup stops it and, when the test
// failed, prints the log's tail.
type Daemon struct {
	Bin        string // the copy of bin/hostlease-gc it runs (inside the env dir)
	DataDir    string
	LogPath    string
	MetricsURL string // "http://127.0.0.1:<port>" of the current process

	t       testing.TB
	args    []string
	timeout time.Duration
	cmd     *exec.Cmd
	done    chan error
	started time.Time
}

// NetnsDir is where this env's containerd creates pod network namespaces
// (netns_mounts_under_state_dir = true).
func (e *Env) NetnsDir() string {
	return filepath.Join(e.Dir, "state", "io.containerd.grpc.v1.cri", "netns")
}

// GCBin returns a private copy of bin/hostlease-gc inside the env dir (made on
// first use), so a concurrent `make build` cannot swap it under a running test.
func (e *Env) GCBin() string {
	e.t.Helper()
	dst := filepath.Join(e.Dir, "hostlease-gc")
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	src, err := ProjectBin("hostlease-gc")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := copyFile(src, dst); err != nil {
		e.t.Fatal(err)
	}
	return dst
}

// OracleLockWait is the --lock-timeout of a suite's reads of the stores
// (list, status, audit): the suites judge hostlease, not the machine, and
// on a node that make test drives to a load of 70 a burst of plugin ADDs
// holds a store's lock back to back for longer than the CLI's default 10s.
// A plugin that holds the lock for good still fails the read. It stays below
// the minute GC gives the whole command.
const OracleLockWait = "45s"

// GC runs the hostlease-gc CLI (e.g. "status", "-o", "json", "--data-dir",
// dir) and returns its stdout; a non-zero exit is an error carrying stderr.
func (e *Env) GC(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.GCBin(), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("hostlease-gc %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// StartDaemon starts `hostlease-gc run` for the env and waits until its first
// sweep reached CRI (/readyz). It fails the test if the daemon does not come up.
func (e *Env) StartDaemon(o DaemonOptions) *Daemon {
	e.t.Helper()
	return StartDaemonOn(DaemonHost{T: e.t, Dir: e.Dir, Endpoint: e.Endpoint, NetnsDir: e.NetnsDir(), GCBin: e.GCBin()}, o)
}

// DaemonHost is what `hostlease-gc run` is pointed at: any CRI runtime's
// socket and the directory where it puts the pods' network namespaces.
type DaemonHost struct {
	T        testing.TB
	Dir      string // where the daemon's log goes
	Endpoint string // the runtime's CRI endpoint ("unix://...")
	NetnsDir string // the runtime's netns dir (--netns-dir)
	GCBin    string // the hostlease-gc binary to run
}

// StartDaemonOn is StartDaemon for any runtime: it starts `hostlease-gc run`
// against h and waits until its first sweep reached CRI (/readyz).
func StartDaemonOn(h DaemonHost, o DaemonOptions) *Daemon {
	h.T.Helper()
	if o.DataDir == "" {
		h.T.Fatal("StartDaemon: DataDir is required")
	}
	d := &Daemon{
		Bin:     h.GCBin,
		DataDir: o.DataDir,
		LogPath: filepath.Join(h.Dir, fmt.Sprintf("hostlease-gc-%d.log", time.Now().UnixNano())),
		t:       h.T,
		timeout: o.ReadyTimeout,
	}
	if d.timeout == 0 {
		d.timeout = 30 * time.Second
	}
	d.args = append([]string{"run",
		"--cri-endpoint", h.Endpoint,
		"--data-dir", o.DataDir,
		"--metrics-addr", "127.0.0.1:0",
		"--no-api",
		"--log-format", "json",
		"--netns-dir", h.NetnsDir,
	}, o.Args...)
	h.T.Cleanup(func() {
		d.stop()
		if h.T.Failed() {
			h.T.Logf("%s", d.LogTail(60))
		}
	})
	d.Start()
	return d
}

// Start starts the daemon (again, after Stop) with the same flags.
func (d *Daemon) Start() {
	t := d.t
	t.Helper()
	if d.cmd != nil {
		t.Fatal("hostlease-gc is already running")
	}
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	offset, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(d.Bin, d.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start hostlease-gc: %v", err)
	}
	logf.Close()
	d.cmd, d.done, d.started = cmd, make(chan error, 1), time.Now()
	go func() { d.done <- cmd.Wait() }()

	deadline := time.Now().Add(d.timeout)
	d.MetricsURL = ""
	for {
		select {
		case err := <-d.done:
			d.done <- err
			d.cmd = nil
			t.Fatalf("hostlease-gc exited during start: %v\n%s", err, d.LogTail(30))
		default:
		}
		if d.MetricsURL == "" {
			for _, ev := range d.eventsFrom(offset) {
				if ev["msg"] == "serving metrics" {
					if a, ok := ev["addr"].(string); ok {
						d.MetricsURL = "http://" + a
					}
				}
			}
		}
		if d.MetricsURL != "" {
			if code, _ := httpGet(d.MetricsURL + "/readyz"); code == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("hung: hostlease-gc not ready within the %v hang guard (metrics %q)\n%s", d.timeout, d.MetricsURL, d.LogTail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the daemon with SIGTERM (SIGKILL after 10s).
func (d *Daemon) Stop() {
	d.t.Helper()
	d.stop()
}

func (d *Daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.cmd = nil
}

// Running reports whether the daemon process is up.
func (d *Daemon) Running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case err := <-d.done:
		d.done <- err
		return false
	default:
		return true
	}
}

// Started is when the current process was started.
func (d *Daemon) Started() time.Time { return d.started }

// Log returns the daemon's whole log.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}

// LogTail returns the last n lines of the daemon's log.
func (d *Daemon) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(d.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "---- hostlease-gc log tail (" + d.LogPath + ") ----\n" + strings.Join(lines, "\n")
}

// Events returns the daemon's JSON log records whose "msg" is msg (all
// records when msg is ""), oldest first, across restarts.
func (d *Daemon) Events(msg string) []map[string]any {
	var out []map[string]any
	for _, ev := range d.eventsFrom(0) {
		if msg == "" || ev["msg"] == msg {
			out = append(out, ev)
		}
	}
	return out
}

func (d *Daemon) eventsFrom(offset int64) []map[string]any {
	f, err := os.Open(d.LogPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// EventTime is the "time" field of a daemon log record.
func EventTime(ev map[string]any) time.Time {
	s, _ := ev["time"].(string)
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// Sample is one metric sample of a scrape.
type Sample = promtext.Sample

// MetricSet is one scrape.
type MetricSet struct {
	Samples []Sample
	Raw     string
}

// Metrics scrapes the daemon's /metrics.
func (d *Daemon) Metrics() (MetricSet, error) {
	if d.MetricsURL == "" {
		return MetricSet{}, errors.New("hostlease-gc is not serving metrics")
	}
	code, body := httpGet(d.MetricsURL + "/metrics")
	if code != http.StatusOK {
		return MetricSet{}, fmt.Errorf("GET /metrics: status %d: %s", code, body)
	}
	return ParseMetrics(body)
}

// ParseMetrics parses a scrape in the Prometheus text exposition format.
func ParseMetrics(text string) (MetricSet, error) {
	samples, err := promtext.Parse(text)
	if err != nil {
		return MetricSet{Raw: text}, fmt.Errorf("parse /metrics: %w", err)
	}
	return MetricSet{Samples: samples, Raw: text}, nil
}

// Sum adds up the samples named name whose labels include all of labels
// (the label pairs are given as "key", "value", ...); ok is false when none
// matched.
func (m MetricSet) Sum(name string, labels ...string) (sum float64, ok bool) {
	for _, s := range m.Samples {
		if s.Name != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if s.Labels[labels[i]] != labels[i+1] {
				match = false
				break
			}
		}
		if match {
			sum += s.Value
			ok = true
		}
	}
	return sum, ok
}

// Lines returns the raw exposition lines (samples, not comments) of the named
// metrics, sorted, for showing to a person.
func (m MetricSet) Lines(names ...string) []string {
	var out []string
	for _, line := range strings.Split(m.Raw, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				out = append(out, line)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func httpGet(url string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
