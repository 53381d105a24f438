// Package gcproc runs `hostlease-gc run` as a real process for tests: it keeps
// the daemon's JSON log lines in the order they were written (the daemon's one
// log stream orders its events without any clock), finds where it serves
// /metrics, and stops it as a DaemonSet rollout does (SIGTERM), killing it
// only after a hang guard.
package gcproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hostlease/hostlease/internal/testing/promtext"
)

// HangGuard bounds every wait on the daemon (its start, its exit after
// SIGTERM): a guard against a hung test, never an assertion of how fast the
// daemon is. It is generous for a loaded machine.
const HangGuard = 2 * time.Minute

// Daemon is one running hostlease-gc process.
type Daemon struct {
	Cmd     *exec.Cmd
	Args    []string
	Addr    string    // host:port of its /metrics
	Started time.Time // just before the process was started

	done    chan struct{} // closed when the process has exited
	scanned chan struct{} // closed when its output is read to the end
	mu      sync.Mutex
	lines   []string
}

// Start runs bin with args, which must make the daemon log JSON and serve
// metrics (--log-format json, --metrics-addr 127.0.0.1:0). wrap, if not nil,
// changes the command before it starts. Start returns once the daemon has
// logged where it serves /metrics; if it exits first or does not say so
// within HangGuard, Start stops it and returns an error holding its log.
func Start(bin string, args []string, wrap func(*exec.Cmd)) (*Daemon, error) {
	d := &Daemon{Args: args, done: make(chan struct{}), scanned: make(chan struct{})}
	d.Cmd = exec.Command(bin, args...)
	if wrap != nil {
		wrap(d.Cmd)
	}
	pr, pw := io.Pipe()
	d.Cmd.Stdout, d.Cmd.Stderr = pw, pw
	addrCh := make(chan string, 1)
	go func() {
		defer close(d.scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.lines = append(d.lines, line)
			d.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "serving metrics" {
				if a, ok := m["addr"].(string); ok {
					select {
					case addrCh <- a:
					default:
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr) // a line over 1 MiB: keep the pipe drained
	}()
	d.Started = time.Now()
	if err := d.Cmd.Start(); err != nil {
		pw.Close()
		return nil, err
	}
	go func() {
		_ = d.Cmd.Wait()
		pw.Close()
		close(d.done)
	}()
	select {
	case d.Addr = <-addrCh:
		return d, nil
	case <-d.done:
		<-d.scanned
		return nil, fmt.Errorf("hostlease-gc %s exited at start: %v\n%s", strings.Join(args, " "), d.Cmd.ProcessState, strings.Join(d.Lines(), "\n"))
	case <-time.After(HangGuard):
		d.Stop()
		return nil, fmt.Errorf("hung: hostlease-gc did not serve metrics within the %s hang guard\n%s", HangGuard, strings.Join(d.Lines(), "\n"))
	}
}

// Done is closed when the process has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Stop ends the daemon with SIGTERM and waits for it and its log; if it is
// still running after HangGuard it is killed (SIGKILL) and Stop reports
// killed. Stopping a stopped daemon does nothing.
func (d *Daemon) Stop() (killed bool) {
	select {
	case <-d.done:
	default:
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(HangGuard):
			_ = d.Cmd.Process.Kill()
			<-d.done
			killed = true
		}
	}
	<-d.scanned
	return killed
}

// Wait polls cond until it holds. It returns an error, holding the daemon's
// log, when the daemon exits first or cond does not hold within HangGuard
// (then the test has hung: the guard is not a budget).
func (d *Daemon) Wait(what string, cond func() bool) error {
	for deadline := time.Now().Add(HangGuard); !cond(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("hung: hostlease-gc: %s did not happen within the %s hang guard\n%s", what, HangGuard, strings.Join(d.Lines(), "\n"))
		}
		select {
		case <-d.done:
			<-d.scanned
			return fmt.Errorf("hostlease-gc exited while waiting for %s: %v\n%s", what, d.Cmd.ProcessState, strings.Join(d.Lines(), "\n"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Lines returns the daemon's output lines so far.
func (d *Daemon) Lines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lines...)
}

// Sequence returns every JSON log entry so far, in the order it was logged.
func (d *Daemon) Sequence() []map[string]any {
	var out []map[string]any
	for _, line := range d.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Entries returns the JSON log entries with message msg, in order.
func (d *Daemon) Entries(msg string) []map[string]any {
	var out []map[string]any
	for _, m := range d.Sequence() {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Get fetches a path of the daemon's HTTP server.
func (d *Daemon) Get(path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + d.Addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Scrape reads and parses /metrics.
func (d *Daemon) Scrape() ([]promtext.Sample, error) {
	code, body, err := d.Get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", code)
	}
	return promtext.Parse(body)
}
