package bench

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

var (
	flagOut     = flag.String("bench.out", "", "also write the markdown report to this file")
	flagDoc     = flag.String("bench.doc", "", "replace the block between <!-- bench:begin --> and <!-- bench:end --> of this markdown file with the report")
	flagK       = flag.Int("bench.k", 200, "ADD+DEL pairs timed per plugin and occupancy point")
	flagKHL16   = flag.Int("bench.k-hl16", 20, "ADD+DEL pairs timed for host-local at 99.9% of a /16 (each of its calls reads every reservation file)")
	flagRounds  = flag.Int("bench.rounds", 5, "rounds of the throughput test; the latency samples are split into this many consecutive chunks to show the spread of p50")
	flagWorkers = flag.Int("bench.workers", 32, "concurrent ADD+DEL loops in the throughput test")
	flagConcIt  = flag.Int("bench.conc-iters", 15, "ADD+DEL pairs per worker per round in the throughput test")
	flagFillPar = flag.Int("bench.fill-par", 0, "parallel execs when filling pools through real ADDs (0: 2 x nproc)")
	flagSkip16  = flag.Bool("bench.skip16", false, "skip the 99.9% of a /16 point (quick runs)")
	flagDir     = flag.String("bench.dir", "", "parent of the temporary state dir (default /var/lib, else /var/tmp)")
	flagBefore  = flag.String("bench.before", "", "a prebuilt hostlease binary (e.g. of the base commit) measured interleaved with the others as hostlease-before")
	flagOwnFill = flag.Bool("bench.own-fill", false, "every hostlease build fills its own pools through its own ADDs, instead of the other builds taking a byte copy of the first one's store at 99.9 % of a pool (a copy runs ~1.1x slower there: an A/B of store writes needs this)")
	flagVariant = flag.String("bench.variants", "", "comma-separated name:tags: also build ./cmd/ipam with these build tags (joined by '+') and measure it interleaved as hostlease-<name> (same-run A/B of code behind a build tag)")
	flagSLOnly  = flag.Bool("bench.sweepload-only", false, "run only the ADD and DEL latency while hostlease-gc sweeps (builds hostlease and hostlease-gc only)")
)

var once sync.Once

// BenchmarkPlugins runs the whole comparison once and prints the report.
// Run it with -benchtime 1x (make bench); it ignores b.N beyond the first run.
func BenchmarkPlugins(b *testing.B) {
	once.Do(func() {
		if err := run(b); err != nil {
			b.Fatal(err)
		}
	})
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// occupancy is one measurement point.
type occupancy struct {
	label  string
	net    string  // network name
	subnet string  // the network's subnet
	held   int     // addresses held: exact count, or
	frac   float64 // a fraction of the pool (evenly spread holes)
}

// fill records how a plugin's state was brought to an occupancy point.
type fill struct {
	point, plugin, method string
	held                  int
	wall                  time.Duration
	calls                 int
}

// stat is one plugin's samples at one point: wall time and CPU time
// (user+system of the plugin process) of each call.
type stat struct {
	add, del       []time.Duration
	addCPU, delCPU []time.Duration
}

type pointResult struct {
	occ   occupancy
	k     []int // per plugin
	stats []stat
}

type throughputResult struct {
	perRound [][]float64 // [plugin][round] calls/s
}

func run(b *testing.B) error {
	if runtime.GOOS != "linux" {
		b.Skip("the benchmark exec's Linux CNI plugins")
	}
	loadStart := loadavg()
	sampler := startLoadSampler(10 * time.Second)
	parent := *flagDir
	dir, err := stateDir(parent)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	progress("state dir %s (%s)", dir, fsDescription(dir))

	root, err := moduleRoot()
	if err != nil {
		return err
	}
	binDir := filepath.Join(dir, "bin")
	if *flagSLOnly {
		return runSweepLoadOnly(b, root, dir, binDir, loadStart, sampler)
	}
	plugins, err := buildPlugins(root, binDir)
	if err != nil {
		return err
	}
	progress("built %s", binDir)

	par := *flagFillPar
	if par <= 0 {
		par = 2 * runtime.NumCPU()
	}
	points := []occupancy{
		{label: "near empty", net: "bench-empty", subnet: "10.16.0.0/16", held: 0},
		{label: "1 000 held", net: "bench-1000", subnet: "10.17.0.0/16", held: 1000},
		{label: "99.9 % of a /20", net: "bench-20", subnet: "10.20.0.0/20", frac: 0.999},
	}
	if !*flagSkip16 {
		points = append(points, occupancy{label: "99.9 % of a /16", net: "bench-16", subnet: "10.18.0.0/16", frac: 0.999})
	}

	var fills []fill
	var results []pointResult
	for _, occ := range points {
		nets := make([]*network, len(plugins))
		for i, p := range plugins {
			nets[i] = newNetwork(p, occ.net, occ.subnet, filepath.Join(dir, "state", p.name), binDir)
		}
		fs, held, err := prepare(occ, nets, par)
		if err != nil {
			return err
		}
		fills = append(fills, fs...)
		occ.held = held
		ks := make([]int, len(plugins))
		for i, p := range plugins {
			ks[i] = *flagK
			if p.kind == kindHostLocal && occ.frac > 0 && occ.subnet == "10.18.0.0/16" {
				ks[i] = min(*flagKHL16, *flagK)
			}
		}
		progress("%s: timing %v ADD+DEL pairs (%s)", occ.label, ks, pluginNames(plugins))
		stats, err := measure(nets, ks, occ.net)
		if err != nil {
			return err
		}
		results = append(results, pointResult{occ: occ, k: ks, stats: stats})
		if err := verifyHeld(nets, held); err != nil {
			return err
		}
		for _, n := range nets {
			_ = os.RemoveAll(filepath.Join(n.dataDir, n.name))
			_ = os.Remove(store.FilePath(n.dataDir, n.name))
		}
	}

	progress("throughput: %d workers x %d ADD+DEL pairs, %d rounds", *flagWorkers, *flagConcIt, *flagRounds)
	tp, err := throughputAll(plugins, dir, binDir)
	if err != nil {
		return err
	}

	// A failed sweep-load measurement still fails the run, after the plugin
	// figures measured so far are reported.
	var sl *sweepLoadResult
	var slErr error
	if !*flagSkipSweepLoad {
		if sl, slErr = runSweepLoad(root, dir, binDir, plugins[indexOf(plugins, kindHostlease)], par); slErr != nil {
			sl = nil
			progress("sweep load: %v (the report below has no sweep-load part)", slErr)
		} else {
			fills = append(fills, fill{fmt.Sprintf("%d records swept", sl.records), "hostlease", fmt.Sprintf("exec ADD, %d in parallel", par), sl.records, sl.fillWall, sl.records})
		}
	}
	var sweeps []sweepBench
	if *flagSweepOut != "" {
		if sweeps, err = readSweepBench(*flagSweepOut); err != nil {
			return err
		}
	}

	in := reportInput{
		plugins: plugins, results: results, fills: fills, tp: tp, sweepLoad: sl, sweeps: sweeps,
		dir: dir, loadStart: loadStart, loadEnd: loadavg(), par: par,
	}
	in.loadLo, in.loadMed, in.loadHi, in.loadN = sampler.Stop()
	report := renderReport(in)
	fmt.Print("\n" + report)
	if *flagOut != "" {
		if err := os.WriteFile(*flagOut, []byte(report), 0o644); err != nil {
			return err
		}
	}
	if *flagDoc != "" {
		if err := replaceBlock(*flagDoc, report); err != nil {
			return err
		}
	}
	reportMetrics(b, plugins, results, tp, sl)
	return slErr
}

// prepare brings each plugin's state to the occupancy point and returns how
// it did so and how many addresses are held.
func prepare(occ occupancy, nets []*network, par int) ([]fill, int, error) {
	if occ.held == 0 && occ.frac == 0 {
		return nil, 0, nil
	}
	hlNet := nets[indexOf(pluginsOf(nets), kindHostLocal)]
	var hleaseNets []*network
	for _, n := range nets {
		if n.p.kind == kindHostlease {
			hleaseNets = append(hleaseNets, n)
		}
	}
	pool, err := hlNet.allocatable()
	if err != nil {
		return nil, 0, err
	}
	var fills []fill
	if occ.frac == 0 {
		// Through their real ADD (host-local's ADD is O(held) here, fine).
		for _, n := range append([]*network{hlNet}, hleaseNets...) {
			progress("%s: filling %s with %d real ADDs (%d in parallel)", occ.label, n.p.name, occ.held, par)
			_, wall, err := n.fillByADD(occ.held, par)
			if err != nil {
				return nil, 0, err
			}
			fills = append(fills, fill{occ.label, n.p.name, fmt.Sprintf("exec ADD, %d in parallel", par), occ.held, wall, occ.held})
		}
		return fills, occ.held, nil
	}

	free := holes(len(pool), occ.frac)
	isHole := make(map[int]bool, len(free))
	for _, i := range free {
		isHole[i] = true
	}
	held := len(pool) - len(free)

	// hostlease: its own ADD for the whole pool, then its own DEL for the holes.
	// A baseline build (-bench.before) gets a copy of that store when it
	// can read it (the same records and layout, without a second fill of
	// minutes), else fills its own the same way; with -bench.own-fill every
	// build fills its own (a copy written in one write runs slower).
	for k, hleaseNet := range hleaseNets {
		if k > 0 && !*flagOwnFill {
			if ok, err := hleaseNet.adoptStore(hleaseNets[0]); err != nil {
				return nil, 0, err
			} else if ok {
				fills = append(fills, fill{occ.label, hleaseNet.p.name, "a copy of " + hleaseNets[0].p.name + "'s store", held, 0, 0})
				continue
			}
		}
		progress("%s: filling %s with %d real ADDs (%d in parallel), then %d DELs", occ.label, hleaseNet.p.name, len(pool), par, len(free))
		owner, wall, err := hleaseNet.fillByADD(len(pool), par)
		if err != nil {
			return nil, 0, err
		}
		var release []string
		for _, i := range free {
			name, ok := owner[pool[i]]
			if !ok {
				return nil, 0, fmt.Errorf("%s fill: nobody holds %s", hleaseNet.p.name, pool[i])
			}
			release = append(release, name)
		}
		start := time.Now()
		if err := hleaseNet.releaseByDEL(release, par); err != nil {
			return nil, 0, err
		}
		wall += time.Since(start)
		fills = append(fills, fill{occ.label, hleaseNet.p.name, fmt.Sprintf("exec ADD of the whole pool, %d in parallel, then DEL of the holes", par), held, wall, len(pool) + len(release)})
	}

	// host-local: its exact on-disk format (its ADD is O(held): filling a /16
	// through it is O(n^2)), as if it had done the same sequence.
	var ips []netip.Addr
	var names []string
	for i, ip := range pool {
		if !isHole[i] {
			ips = append(ips, ip)
			names = append(names, fmt.Sprintf("fill-%06d", i))
		}
	}
	start := time.Now()
	if err := writeHostLocalState(hlNet.dataDir, hlNet.name, ips, names, pool[len(pool)-1]); err != nil {
		return nil, 0, err
	}
	fills = append(fills, fill{occ.label, "host-local", "files written in host-local's format (not its ADD)", held, time.Since(start), 0})
	return fills, held, nil
}

// verifyHeld checks (outside the timings) that the measurement left the
// state at its occupancy: every timed ADD was undone by its DEL.
func verifyHeld(nets []*network, want int) error {
	for _, n := range nets {
		switch n.p.kind {
		case kindHostLocal:
			entries, err := os.ReadDir(filepath.Join(n.dataDir, n.name))
			if err != nil {
				continue // nothing held yet: the near-empty point
			}
			held := 0
			for _, e := range entries {
				if _, err := netip.ParseAddr(e.Name()); err == nil {
					held++
				}
			}
			if held != want {
				return fmt.Errorf("%s holds %d addresses after the measurement, want %d", n.p.name, held, want)
			}
		case kindHostlease:
			s, err := store.Open(store.FilePath(n.dataDir, n.name), store.OpenOptions{ReadOnly: true})
			if err != nil {
				return err
			}
			var held int
			err = s.View(func(tx *store.Tx) error { held = tx.Count(); return nil })
			s.Close()
			if err != nil {
				return err
			}
			if held != want {
				return fmt.Errorf("%s holds %d addresses after the measurement, want %d", n.p.name, held, want)
			}
		}
	}
	return nil
}

// measure times ks[i] {ADD a new container; DEL it} pairs for each plugin,
// interleaved: the plugins take turns, in a new random order every turn
// (seeded: the same sequence every run), so that machine noise hits them
// alike and no plugin always runs right after the same one — after
// host-local's ADD at a full pool, which reads thousands of files, the next
// call finds the CPU caches cold. A plugin with fewer pairs is spread evenly
// over the run. A few untimed pairs warm each plugin up first.
func measure(nets []*network, ks []int, tag string) ([]stat, error) {
	for _, n := range nets {
		for w := 0; w < 3; w++ {
			name := fmt.Sprintf("warm-%s-%d", tag, w)
			if _, _, err := n.call("ADD", name); err != nil {
				return nil, err
			}
			if _, _, err := n.call("DEL", name); err != nil {
				return nil, err
			}
		}
	}
	k := slices.Max(ks)
	stats := make([]stat, len(nets))
	order := rand.New(rand.NewPCG(uint64(len(tag)), 12))
	for i := 0; i < k; i++ {
		for _, p := range order.Perm(len(nets)) {
			if i*ks[p]/k == (i+1)*ks[p]/k {
				continue
			}
			name := fmt.Sprintf("probe-%s-%d", tag, i)
			d, cpu, _, err := nets[p].callCPU("ADD", name)
			if err != nil {
				return nil, err
			}
			stats[p].add, stats[p].addCPU = append(stats[p].add, d), append(stats[p].addCPU, cpu)
			d, cpu, _, err = nets[p].callCPU("DEL", name)
			if err != nil {
				return nil, err
			}
			stats[p].del, stats[p].delCPU = append(stats[p].del, d), append(stats[p].delCPU, cpu)
		}
	}
	return stats, nil
}

// throughputAll measures each plugin's 32-way ADD+DEL rate on an empty /16,
// the plugins taking turns round by round, in a new random order every round
// (seeded: the same sequence every run), so that no plugin always runs right
// after the same one. Before each batch the filesystems are synced: host-local
// never fsyncs, and the files its batch wrote would otherwise be written back
// by the kernel's flusher during the next batch, competing with that
// plugin's fdatasyncs (a fixed order put hostlease right after host-local).
func throughputAll(plugins []*plugin, dir, binDir string) (throughputResult, error) {
	nets := make([]*network, len(plugins))
	for i, p := range plugins {
		nets[i] = newNetwork(p, "bench-conc", "10.19.0.0/16", filepath.Join(dir, "state", p.name), binDir)
	}
	res := throughputResult{perRound: make([][]float64, len(plugins))}
	order := rand.New(rand.NewPCG(uint64(*flagWorkers), 32))
	for r := 0; r < *flagRounds; r++ {
		for _, p := range order.Perm(len(nets)) {
			syscall.Sync()
			rate, err := throughput(nets[p], *flagWorkers, *flagConcIt, r)
			if err != nil {
				return res, err
			}
			res.perRound[p] = append(res.perRound[p], rate)
		}
	}
	return res, nil
}

// throughput runs workers loops of iters {ADD; DEL} at once and returns the
// calls per second over the wall time of the whole batch.
func throughput(n *network, workers, iters, round int) (float64, error) {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	startGate := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			for i := 0; i < iters; i++ {
				name := fmt.Sprintf("conc-%d-%d-%d", round, w, i)
				if _, _, err := n.call("ADD", name); err != nil {
					errs <- err
					return
				}
				if _, _, err := n.call("DEL", name); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	start := time.Now()
	close(startGate)
	wg.Wait()
	wall := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(2*workers*iters) / wall.Seconds(), nil
}

// stateDir makes the temporary state dir on the filesystem of /var/lib
// (where a node keeps CNI state), not on a tmpfs /tmp.
func stateDir(parent string) (string, error) {
	parents := []string{"/var/lib", "/var/tmp", os.TempDir()}
	if parent != "" {
		parents = []string{parent}
	}
	var firstErr error
	for _, p := range parents {
		d, err := os.MkdirTemp(p, "hostlease-bench-")
		if err == nil {
			return d, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", firstErr
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(gomod), nil
}

// build builds pkg as make build builds the plugin: static, stripped; with
// the build tags given (comma-separated, may be empty).
func build(root, pkg, out, tags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-tags", tags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// fsDescription names the filesystem of dir and says whether it is the one
// holding /var/lib.
func fsDescription(dir string) string {
	var st syscall.Statfs_t
	name := "unknown"
	if err := syscall.Statfs(dir, &st); err == nil {
		names := map[int64]string{
			0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
			0x794c7630: "overlayfs", 0x2fc12fc1: "zfs", 0x6969: "nfs", 0xF2F52010: "f2fs",
		}
		if n, ok := names[int64(st.Type)]; ok {
			name = n
		} else {
			name = fmt.Sprintf("fs type 0x%x", st.Type)
		}
	}
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) == nil && syscall.Stat("/var/lib", &b) == nil {
		if a.Dev == b.Dev {
			name += ", same filesystem as /var/lib"
		} else {
			name += ", NOT the filesystem of /var/lib"
		}
	}
	return name
}

func replaceBlock(path, report string) error {
	const begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s block", path, begin, end)
	}
	s = s[:i+len(begin)] + "\n" + report + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
