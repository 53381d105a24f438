package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemonProc is a `hostlease-gc run` process this test started, its stderr
// read line by line.
type daemonProc struct {
	cmd   *exec.Cmd
	lines chan string
	all   []string
}

func startDaemon(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	buildBinaries(t)
	cmd := exec.Command(filepath.Join(binDir, "hostlease-gc"), append([]string{"run", "--no-api", "--metrics-addr", ""}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", strings.Join(p.all, "\n"))
		}
	})
	return p
}

// waitLine returns the first line (from now on) containing s.
func (p *daemonProc) waitLine(t *testing.T, s string) string {
	t.Helper()
	deadline := time.After(time.Minute) // hang guard only
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("daemon exited before logging %q", s)
			}
			p.all = append(p.all, l)
			if strings.Contains(l, s) {
				return l
			}
		case <-deadline:
			t.Fatalf("daemon never logged %q", s)
		}
	}
}

// stop sends SIGTERM to the process and returns the rest of its stderr.
func (p *daemonProc) stop(t *testing.T) []string {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range p.lines {
		p.all = append(p.all, l)
		rest = append(rest, l)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v", err)
	}
	return rest
}

// The daemon's logs: --log-level debug shows the per-interval sweep lines,
// JSON logs carry durations as seconds (numbers), and SIGTERM gets one last
// line saying it stopped.
func TestDaemonLogs(t *testing.T) {
	dataDir := t.TempDir()
	add(t, ipamNet{name: "logs", dataDir: dataDir, rangeSets: subnets("10.89.0.0/24")}, "sandbox-a")
	cri := startCRI(t)
	p := startDaemon(t, "--cri-endpoint", cri.Endpoint(), "--data-dir", dataDir, "--netns-dir", t.TempDir(),
		"--interval", "1s", "--log-format", "json", "--log-level", "debug")
	var started map[string]any
	if err := json.Unmarshal([]byte(p.waitLine(t, `"msg":"hostlease-gc started"`)), &started); err != nil {
		t.Fatal(err)
	}
	if started["interval"] != 1.0 || started["grace"] != 120.0 || started["minAge"] != 300.0 {
		t.Errorf("started line: interval %#v grace %#v minAge %#v, want seconds as numbers (1, 120, 300)", started["interval"], started["grace"], started["minAge"])
	}
	var sweep map[string]any
	if err := json.Unmarshal([]byte(p.waitLine(t, `"trigger":"interval"`)), &sweep); err != nil {
		t.Fatal(err)
	}
	if d, ok := sweep["duration"].(float64); sweep["level"] != "DEBUG" || !ok || d <= 0 || d > 600 {
		t.Errorf("interval sweep line: level %#v duration %#v, want DEBUG and seconds as a number", sweep["level"], sweep["duration"])
	}
	rest := p.stop(t)
	if len(rest) == 0 || !strings.Contains(rest[len(rest)-1], `"msg":"hostlease-gc stopped"`) {
		t.Errorf("want a last line saying the daemon stopped, got %q", rest)
	}

	// At warn, only what calls for a person: here the missing data dir.
	p = startDaemon(t, "--cri-endpoint", cri.Endpoint(), "--data-dir", filepath.Join(dataDir, "typo"), "--netns-dir", t.TempDir(),
		"--log-level", "warn")
	warn := p.waitLine(t, "data dir missing")
	rest = p.stop(t)
	for _, l := range append([]string{warn}, rest...) {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") {
			t.Errorf("--log-level warn printed %q", l)
		}
	}
	if !strings.Contains(warn, "does not exist") {
		t.Errorf("missing data dir line: %q", warn)
	}
	r := gcExec(t, "run", "--no-api", "--log-level", "verbose")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--log-level must be debug, info, warn or error") {
		t.Errorf("run --log-level verbose: %s", r)
	}
}
