// Package faultinject damages real hostlease stores the way bit rot, a bad
// restore, a bug or an operator would, and checks that every promise of the
// failure model still holds afterwards.
//
// TestMain builds bin/hostlease and bin/hostlease-gc into a temporary
// directory. Every store is written by real plugin processes (exec'd with the
// CNI environment and config on stdin, as a runtime does), damaged with
// bbolt's own API (logical damage: a record, an index entry, a meta value) or
// by writing bytes at page offsets of the file (physical damage: page types,
// element counts, meta pages), and then driven again through real processes:
// ADD/DEL/CHECK/GC/STATUS, the hostlease-gc CLI and one sweep of the
// hostlease-gc daemon against a real gRPC CRI (internal/testing/fakecri).
//
// What is asserted after each damage is a model of what the test handed out
// to whom (see model.go), not what the code happens to do:
//   - DEL exits 0, always;
//   - ADD never returns an address the model says a live owner (or a
//     quarantined record) holds, nor one the store still has a record for;
//   - no live sandbox loses its address (no DEL, GC or sweep frees it);
//   - a damaged record is visible to an operator (list/status);
//   - a store that is still a store is never set aside;
//   - after the documented repair (release, rebuild) ADD serves again.
//
// The damage points are chosen from a seeded random source: the seed is
// printed, -faultinject.seed=N replays one (every case on it), and without
// it each case runs on one seed of a fixed set (the CI set, see ciSeeds).
package faultinject

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/fakecri"
	"github.com/hostlease/hostlease/internal/testing/gcproc"
	"github.com/hostlease/hostlease/internal/testing/promtext"
	"github.com/hostlease/hostlease/internal/testing/testbin"
)

var (
	seedFlag = flag.Int64("faultinject.seed", 0, "replay one seed: every damage case on it (0: the fixed CI seeds)")
	caseFlag = flag.String("faultinject.case", "", "run only damage cases whose name contains this")
	fullFlag = flag.Bool("faultinject.full", false, "run every damage case on every CI seed (default: each case on one of them)")
)

// ciSeeds are the seeds run when no -faultinject.seed is given. Each damage
// case of the catalogue runs on one of them in turn (case i of the catalogue
// on ciSeeds[i%len(ciSeeds)]), so that every kind of damage is tried in every
// run, at a point its seed chose, for a third of the processes of trying
// each kind three times; -faultinject.full (or FAULTINJECT_FULL=1) tries
// every case on every seed.
var ciSeeds = []int64{1, 2, 3}

// full reports whether every case runs on every seed.
func full() bool { return *fullFlag || os.Getenv("FAULTINJECT_FULL") == "1" }

func seeds() []int64 {
	if *seedFlag != 0 {
		return []int64{*seedFlag}
	}
	return ciSeeds
}

var binDir string

func pluginBin() string { return filepath.Join(binDir, "hostlease") }
func gcBin() string     { return filepath.Join(binDir, "hostlease-gc") }

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, "faultinject", map[string]string{"hostlease": testbin.Plugin, "hostlease-gc": testbin.GC}, &binDir))
}

// outcome is what one plugin process did.
type outcome = cniexec.Outcome

// invocation is one plugin process: the CNI environment and the config.
type invocation struct {
	Command, ContainerID, Netns string
	Conf                        []byte
	// Wrap lets environment tests change the process (a mount namespace,
	// resource limits) without touching the test process.
	Wrap func(*exec.Cmd)
}

// runPlugin runs bin/hostlease once as a runtime would: CNI_* environment,
// pod metadata in CNI_ARGS, the config on stdin.
func runPlugin(inv invocation) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBin())
	id := inv.ContainerID
	cmd.Env = []string{
		"CNI_COMMAND=" + inv.Command,
		"CNI_CONTAINERID=" + id,
		"CNI_NETNS=" + inv.Netns,
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + binDir,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=fi;K8S_POD_NAME=pod-" + shortName(id) + ";K8S_POD_UID=uid-" + shortName(id) + ";K8S_POD_INFRA_CONTAINER_ID=" + id,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
	cmd.Stdin = bytes.NewReader(inv.Conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if inv.Wrap != nil {
		inv.Wrap(cmd)
	}
	start := time.Now()
	err := cmd.Run()
	return cniexec.Classify(err, stdout.Bytes(), stderr.Bytes(), time.Since(start))
}

func shortName(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// cliResult is one hostlease-gc CLI run.
type cliResult struct {
	Args           []string
	Stdout, Stderr string
	Code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("hostlease-gc %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// runCLI runs bin/hostlease-gc as an operator does.
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	return runCLIIn(t, nil, args...)
}

// runCLIIn is runCLI with the process changed by wrap (a namespace, limits).
func runCLIIn(t testing.TB, wrap func(*exec.Cmd), args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gcBin(), args...)
	if wrap != nil {
		wrap(cmd)
	}
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("hostlease-gc %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// startCRI serves a fake runtime until the test ends, on a socket in a short
// directory (unix socket paths are limited to 108 bytes).
func startCRI(t testing.TB) *fakecri.Server { return fakecri.StartForTest(t) }

// sweepResult is what one daemon sweep did, as its log and metrics show.
type sweepResult struct {
	Log     []string
	Metrics []promtext.Sample
}

// metric sums every series of name whose labels include labels.
func (s sweepResult) metric(name string, labels map[string]string) (float64, bool) {
	v, found := 0.0, false
next:
	for _, m := range s.Metrics {
		if m.Name != name {
			continue
		}
		for k, want := range labels {
			if m.Labels[k] != want {
				continue next
			}
		}
		v += m.Value
		found = true
	}
	return v, found
}

// daemon is a running `hostlease-gc run` process (internal/testing/gcproc): a real
// process talking gRPC to a runtime over its unix socket.
type daemon struct {
	*gcproc.Daemon
	t testing.TB
}

// startDaemon starts `hostlease-gc run` with flags (wrap changes the process)
// and waits until it serves /metrics.
func startDaemon(t testing.TB, wrap func(*exec.Cmd), flags ...string) *daemon {
	t.Helper()
	args := append([]string{"run", "--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--no-api"}, flags...)
	p, err := gcproc.Start(gcBin(), args, wrap)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{Daemon: p, t: t}
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) log() []string { return d.Lines() }

// stop ends the daemon with SIGTERM (SIGKILL after the hang guard) and waits
// for it and its log.
func (d *daemon) stop() { d.Stop() }

// scrape reads /metrics (nil when it cannot).
func (d *daemon) scrape() []promtext.Sample {
	samples, _ := d.Scrape()
	return samples
}

// waitFor polls cond until it holds; the deadline is a hang guard.
func (d *daemon) waitFor(what string, cond func() bool) {
	d.t.Helper()
	if err := d.Wait(what, cond); err != nil {
		d.stop()
		d.t.Fatal(err)
	}
}

// daemonSweep runs `hostlease-gc run` until it has finished `sweeps` sweeps
// (its hostlease_sweeps_total), then stops it with SIGTERM.
func daemonSweep(t testing.TB, sweeps int, flags ...string) sweepResult {
	t.Helper()
	return daemonSweepIn(t, nil, sweeps, flags...)
}

// daemonSweepIn is daemonSweep with the process changed by wrap.
func daemonSweepIn(t testing.TB, wrap func(*exec.Cmd), sweeps int, flags ...string) sweepResult {
	t.Helper()
	d := startDaemon(t, wrap, flags...)
	var samples []promtext.Sample
	d.waitFor(fmt.Sprintf("%d sweeps", sweeps), func() bool {
		samples = d.scrape()
		n, _ := sweepResult{Metrics: samples}.metric("hostlease_sweeps_total", nil)
		return n >= float64(sweeps)
	})
	d.stop()
	return sweepResult{Log: d.log(), Metrics: samples}
}
