package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/internal/testing/fakecri"
	"github.com/hostlease/hostlease/internal/testing/promtext"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

var (
	flagSkipSweepLoad = flag.Bool("bench.skip-sweepload", false, "skip ADD latency while hostlease-gc sweeps")
	flagSweepRecords  = flag.Int("bench.sweep-records", 10000, "records in the store hostlease-gc sweeps (filled through exec'd ADDs)")
	flagSweepK        = flag.Int("bench.sweep-k", 200, "ADD+DEL pairs timed without and with the sweeping daemon (each)")
	flagSweepRounds   = flag.Int("bench.sweep-rounds", 5, "rounds alternating no daemon / sweeping daemon")
	flagSweepInterval = flag.Duration("bench.sweep-interval", time.Second, "hostlease-gc run --interval during the measurement (1s is the least it accepts)")
	flagSweepOut      = flag.String("bench.sweep", "", "output of `go test -bench Sweep10k ./pkg/daemon/` to include in the report (make bench passes it)")
)

// The daemon must not reclaim during the measurement: the absent half of the
// sandboxes stays a set of leak candidates whose observations it keeps, and
// the store keeps its records. --min-age and --grace far beyond the run do
// that; --netns-dir names a directory of the benchmark's own, so the host's
// /var/run/netns (where the records' netns paths point) is never judged.
const sweepLoadMinAge = "1h"

// sweepLoadResult is the measurement of ADD+DEL latency with no daemon (off)
// and while a real hostlease-gc process sweeps the same data dir (on).
type sweepLoadResult struct {
	records, listed int
	fillWall        time.Duration
	interval        time.Duration
	k, rounds       int
	off, on         stat
	// per round, in time order: the p50 of each mode's ADDs and DELs
	roundAdd, roundDel [][2]time.Duration
	// the daemon during the timed windows of the "on" mode
	windowWall         time.Duration
	sweepsOK, sweepsKO float64
	sweepSum           float64 // seconds of sweeping (hostlease_sweep_duration_seconds_sum)
	sweepCount         float64
	criLists           int64
	reclaims           float64
}

// runSweepLoad fills a store with records through hostlease's real ADD,
// serves half of them as READY sandboxes from a gRPC CRI, and times exec'd
// ADD+DEL pairs in rounds: without a daemon, and while `hostlease-gc run`
// sweeps the data dir every --interval. The two modes alternate round by
// round (and swap order each round) so load from elsewhere hits both alike.
func runSweepLoad(root, dir, binDir string, hostlease *plugin, par int) (*sweepLoadResult, error) {
	gcPath := filepath.Join(binDir, "hostlease-gc")
	if err := build(root, "./cmd/ipam-gc", gcPath, ""); err != nil {
		return nil, err
	}
	res := &sweepLoadResult{records: *flagSweepRecords, interval: *flagSweepInterval, k: *flagSweepK, rounds: max(1, *flagSweepRounds)}
	dataDir := filepath.Join(dir, "state-sweep")
	netnsDir := filepath.Join(dir, "netns-sweep")
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, err
	}
	n := newNetwork(hostlease, "bench-sweep", "10.21.0.0/16", dataDir, binDir)
	progress("sweep load: filling hostlease with %d real ADDs (%d in parallel)", res.records, par)
	owner, wall, err := n.fillByADD(res.records, par)
	if err != nil {
		return nil, err
	}
	res.fillWall = wall
	if len(owner) != res.records {
		return nil, fmt.Errorf("sweep load: %d ADDs hold %d addresses", res.records, len(owner))
	}

	// Half of the sandboxes (every other fill container) are READY, with the
	// address their ADD got; the other half are gone from the runtime.
	criDir, err := os.MkdirTemp("", "hlb-cri-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(criDir)
	cri := fakecri.New(filepath.Join(criDir, "cri.sock"))
	listed := 0
	for ip, name := range owner {
		i, err := strconv.Atoi(strings.TrimPrefix(name, "fill-"))
		if err != nil {
			return nil, fmt.Errorf("sweep load: fill container %q", name)
		}
		if i%2 == 0 {
			id := containerID(name)
			cri.Put(fakecri.Sandbox{ID: id, Name: name, Namespace: "bench", UID: id[:8] + "-0000-4000-8000-" + id[8:20],
				State: runtimeapi.PodSandboxState_SANDBOX_READY, IPs: []netip.Addr{ip}})
			listed++
		}
	}
	res.listed = listed
	if err := cri.Start(); err != nil {
		return nil, err
	}
	defer cri.Stop()

	logPath := filepath.Join(dir, "hostlease-gc.log")
	args := []string{"run", "--data-dir", dataDir, "--interval", res.interval.String(), "--no-api",
		"--metrics-addr", "127.0.0.1:0", "--cri-endpoint", cri.Endpoint(),
		"--netns-dir", netnsDir, "--min-age", sweepLoadMinAge, "--grace", sweepLoadMinAge}
	progress("sweep load: %d sandboxes listed READY of %d; %d ADD+DEL pairs each without and with `hostlease-gc %s`, %d rounds",
		res.listed, res.records, res.k, strings.Join(args, " "), res.rounds)

	// Warm the plugin up (untimed).
	for w := range 3 {
		name := fmt.Sprintf("warm-sweep-%d", w)
		if _, _, err := n.call("ADD", name); err != nil {
			return nil, err
		}
		if _, _, err := n.call("DEL", name); err != nil {
			return nil, err
		}
	}

	seq := 0
	timePairs := func(count int, st *stat) (adds, dels []time.Duration, err error) {
		for range count {
			name := fmt.Sprintf("sweepload-%d", seq)
			seq++
			d, cpu, _, err := n.callCPU("ADD", name)
			if err != nil {
				return nil, nil, err
			}
			st.add, st.addCPU = append(st.add, d), append(st.addCPU, cpu)
			adds = append(adds, d)
			d, cpu, _, err = n.callCPU("DEL", name)
			if err != nil {
				return nil, nil, err
			}
			st.del, st.delCPU = append(st.del, d), append(st.delCPU, cpu)
			dels = append(dels, d)
		}
		return adds, dels, nil
	}

	listsBefore := int64(cri.Lists())
	for r := range res.rounds {
		count := (r+1)*res.k/res.rounds - r*res.k/res.rounds
		var p50s [2][2]time.Duration // [mode][add, del]
		for j := range 2 {
			mode := (r + j) % 2 // 0: no daemon, 1: sweeping daemon
			if mode == 0 {
				adds, dels, err := timePairs(count, &res.off)
				if err != nil {
					return nil, err
				}
				p50s[0] = [2]time.Duration{percentile(adds, 0.5), percentile(dels, 0.5)}
				continue
			}
			d, err := startDaemon(gcPath, args, logPath)
			if err != nil {
				return nil, err
			}
			// Steady state: the first sweeps of a new daemon decode every
			// record, and the very first ones rewrite observations.
			before, err := d.waitSweeps(5, 2*time.Minute)
			if err == nil {
				start := time.Now()
				var adds, dels []time.Duration
				adds, dels, err = timePairs(count, &res.on)
				res.windowWall += time.Since(start)
				if err == nil {
					var after daemonMetrics
					after, err = d.scrape()
					if err == nil {
						res.sweepsOK += after.ok - before.ok
						res.sweepsKO += after.failed - before.failed
						res.sweepSum += after.durSum - before.durSum
						res.sweepCount += after.durCount - before.durCount
						res.reclaims = max(res.reclaims, after.reclaims)
						if after.failed > before.failed {
							err = fmt.Errorf("hostlease-gc during the timed window: sweeps ok %v -> %v, failed %v -> %v",
								before.ok, after.ok, before.failed, after.failed)
						}
					}
				}
				p50s[1] = [2]time.Duration{percentile(adds, 0.5), percentile(dels, 0.5)}
			}
			if stopErr := d.stop(); err == nil {
				err = stopErr
			}
			if err != nil {
				return nil, fmt.Errorf("%v\nhostlease-gc log (%s), last lines:\n%s", err, logPath, tail(logPath, 20))
			}
		}
		res.roundAdd = append(res.roundAdd, [2]time.Duration{p50s[0][0], p50s[1][0]})
		res.roundDel = append(res.roundDel, [2]time.Duration{p50s[0][1], p50s[1][1]})
	}
	res.criLists = int64(cri.Lists()) - listsBefore
	if res.sweepsOK == 0 {
		return nil, fmt.Errorf("hostlease-gc finished no sweep during the timed windows (%s in all): nothing was measured under sweeps",
			res.windowWall.Round(time.Millisecond))
	}
	if res.reclaims != 0 {
		return nil, fmt.Errorf("hostlease-gc reclaimed %v addresses during the benchmark", res.reclaims)
	}

	// Every timed ADD was undone by its DEL, and the daemon reclaimed nothing.
	s, err := store.Open(store.FilePath(dataDir, n.name), store.OpenOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var held int
	if err := s.View(func(tx *store.Tx) error { held = tx.Count(); return nil }); err != nil {
		return nil, err
	}
	if held != res.records {
		return nil, fmt.Errorf("sweep load: the store holds %d records after the measurement, want %d", held, res.records)
	}
	return res, nil
}

// runSweepLoadOnly is run with -bench.sweepload-only: hostlease's ADD and DEL
// without and with a sweeping hostlease-gc, and nothing else.
func runSweepLoadOnly(b *testing.B, root, dir, binDir, loadStart string, sampler *loadSampler) error {
	hostlease := &plugin{name: "hostlease", kind: kindHostlease, path: filepath.Join(binDir, "hostlease")}
	if err := build(root, "./cmd/ipam", hostlease.path, ""); err != nil {
		return err
	}
	par := *flagFillPar
	if par <= 0 {
		par = 2 * runtime.NumCPU()
	}
	sl, err := runSweepLoad(root, dir, binDir, hostlease, par)
	if err != nil {
		return err
	}
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	renderSweepLoad(w, sl)
	lo, med, hi, n := sampler.Stop()
	w("\n- nproc %d, %s, kernel %s, %s; state dir on %s\n", runtime.NumCPU(), cpuModel(), kernel(), runtime.Version(), fsDescription(dir))
	w("- load average at start %s, at end %s; 1-minute load sampled every 10 s during the run (%d samples): min %.2f, median %.2f, max %.2f\n",
		loadStart, loadavg(), n, lo, med, hi)
	fmt.Print("\n" + sb.String())
	if *flagOut != "" {
		if err := os.WriteFile(*flagOut, []byte(sb.String()), 0o644); err != nil {
			return err
		}
	}
	b.ReportMetric(ratio(percentile(sl.on.add, 0.5), percentile(sl.off.add, 0.5)), "sweeping/idle-ADD-p50")
	b.ReportMetric(ratio(percentile(sl.on.add, 0.99), percentile(sl.off.add, 0.99)), "sweeping/idle-ADD-p99")
	return nil
}

// daemon is a running `hostlease-gc run` process.
type daemon struct {
	cmd     *exec.Cmd
	done    chan error
	addr    chan string
	metrics string // http://addr/metrics once known
	logFile *os.File
}

var servingRE = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

func startDaemon(path string, args []string, logPath string) (*daemon, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "--- %s start\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(path, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = lf, pw
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	d := &daemon{cmd: cmd, done: make(chan error, 1), addr: make(chan string, 1), logFile: lf}
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(lf, line)
			if m := servingRE.FindStringSubmatch(line); m != nil && !sent {
				d.addr <- m[1]
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		d.done <- err
	}()
	return d, nil
}

// stop ends the daemon with SIGTERM, as the kubelet does, and waits for it.
func (d *daemon) stop() error {
	defer d.logFile.Close()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			return fmt.Errorf("hostlease-gc run: %v", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("hostlease-gc run did not stop within 30s of SIGTERM")
	}
}

// daemonMetrics are the figures read from the daemon's /metrics.
type daemonMetrics struct {
	ok, failed, durSum, durCount, reclaims float64
}

func (d *daemon) scrape() (daemonMetrics, error) {
	var m daemonMetrics
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.metrics, nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	samples, err := promtext.Parse(string(body))
	if err != nil {
		return m, err
	}
	for _, smp := range samples {
		v := smp.Value
		switch smp.Name {
		case "hostlease_sweeps_total":
			if smp.Labels["result"] == "ok" {
				m.ok = v
			} else {
				m.failed += v
			}
		case "hostlease_sweep_duration_seconds_sum":
			m.durSum = v
		case "hostlease_sweep_duration_seconds_count":
			m.durCount = v
		case "hostlease_reclaims_total":
			m.reclaims += v
		}
	}
	return m, nil
}

// waitSweeps waits until the daemon has finished n sweeps, all ok, and
// returns its metrics then.
func (d *daemon) waitSweeps(n float64, timeout time.Duration) (daemonMetrics, error) {
	deadline := time.After(timeout)
	select {
	case addr := <-d.addr:
		d.metrics = "http://" + addr + "/metrics"
	case err := <-d.done:
		d.done <- err
		return daemonMetrics{}, fmt.Errorf("hostlease-gc run exited: %v", err)
	case <-deadline:
		return daemonMetrics{}, fmt.Errorf("hostlease-gc run did not serve metrics within %s", timeout)
	}
	for {
		m, err := d.scrape()
		if err != nil {
			return m, err
		}
		if m.failed > 0 {
			return m, fmt.Errorf("hostlease-gc: %v failed sweeps", m.failed)
		}
		if m.ok >= n {
			return m, nil
		}
		select {
		case err := <-d.done:
			d.done <- err
			return m, fmt.Errorf("hostlease-gc run exited: %v", err)
		case <-deadline:
			return m, fmt.Errorf("hostlease-gc run: %v ok sweeps after %s, want %v", m.ok, timeout, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// sweepBench is one line of `go test -bench Sweep10k ./pkg/daemon/`.
type sweepBench struct {
	name  string
	iters int
	ns    float64
}

var benchLineRE = regexp.MustCompile(`^(BenchmarkSweep10k\w*)(?:-\d+)?\s+(\d+)\s+([\d.]+) ns/op`)

// readSweepBench parses the pkg/daemon sweep benchmarks' output.
func readSweepBench(path string) ([]sweepBench, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []sweepBench
	for _, line := range strings.Split(string(b), "\n") {
		m := benchLineRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		iters, _ := strconv.Atoi(m[2])
		ns, _ := strconv.ParseFloat(m[3], 64)
		out = append(out, sweepBench{name: m[1], iters: iters, ns: ns})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no BenchmarkSweep10k results", path)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// loadSampler records the 1-minute load average every interval.
type loadSampler struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
}

func startLoadSampler(every time.Duration) *loadSampler {
	s := &loadSampler{stop: make(chan struct{})}
	sample := func() {
		f := strings.Fields(loadavg())
		if len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, v)
				s.mu.Unlock()
			}
		}
	}
	sample()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the samples' minimum, median and maximum.
func (s *loadSampler) Stop() (lo, med, hi float64, n int) {
	close(s.stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return 0, 0, 0, 0
	}
	c := append([]float64(nil), s.samples...)
	sort.Float64s(c)
	return c[0], median(c), c[len(c)-1], len(c)
}
