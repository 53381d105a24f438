package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// percentile is the nearest-rank percentile p (0 < p <= 1) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// chunks splits ds (in time order) into n consecutive parts.
func chunks(ds []time.Duration, n int) [][]time.Duration {
	n = max(1, min(n, len(ds)))
	out := make([][]time.Duration, n)
	for i := range n {
		out[i] = ds[i*len(ds)/n : (i+1)*len(ds)/n]
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// chunkRatios is the p50 ratio a/b in each of n time-aligned chunks.
func chunkRatios(a, b []time.Duration, n int) (lo, hi float64) {
	ca, cb := chunks(a, n), chunks(b, n)
	m := min(len(ca), len(cb))
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range m {
		r := float64(percentile(ca[i], 0.5)) / float64(percentile(cb[i], 0.5))
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	return lo, hi
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

type reportInput struct {
	plugins            []*plugin
	results            []pointResult
	fills              []fill
	tp                 throughputResult
	sweepLoad          *sweepLoadResult
	sweeps             []sweepBench
	dir                string
	loadStart, loadEnd string
	loadLo, loadMed    float64
	loadHi             float64
	loadN              int
	par                int
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Targets of the plugin figures, against the durable floor (issue 12): a
// crash-safe IPAM cannot go below that floor, so what hostlease adds above it
// is what its libraries, config, store and policy cost.
const (
	latencyTarget    = 1.2 // hostlease p50 / durable floor p50, ADD and DEL, every occupancy
	throughputTarget = 0.8 // hostlease 32-way calls/s / durable floor's
	// boltBudget (issue 19): hostlease p50 / skel-bbolt floor p50, ADD and
	// DEL, every occupancy: what hostlease costs above a plugin on the same
	// libraries.
	boltBudget = 1.1
)

func renderReport(in reportInput) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	rounds := *flagRounds
	ps := in.plugins
	static, skel, durable := indexOf(ps, kindStaticFloor), indexOf(ps, kindSkelFloor), indexOf(ps, kindDurableFloor)
	skelDurable := indexOf(ps, kindSkelDurableFloor)
	hostLocal, hostlease := indexOf(ps, kindHostLocal), indexOf(ps, kindHostlease)
	var hleases []int // hostlease and, with -bench.before, its baseline build
	for i, p := range ps {
		if p.kind == kindHostlease {
			hleases = append(hleases, i)
		}
	}
	samples := func(st stat, verb string) []time.Duration {
		if verb == "ADD" {
			return st.add
		}
		return st.del
	}
	cpuSamples := func(st stat, verb string) []time.Duration {
		if verb == "ADD" {
			return st.addCPU
		}
		return st.delCPU
	}
	p50 := func(ds []time.Duration) time.Duration { return percentile(ds, 0.5) }
	cell := func(a, b []time.Duration) string {
		lo, hi := chunkRatios(a, b, rounds)
		return fmt.Sprintf("%.2f [%.2f-%.2f]", ratio(p50(a), p50(b)), lo, hi)
	}
	header := func(first []string, cols []string) {
		w("| %s | %s |\n|%s%s\n", strings.Join(first, " | "), strings.Join(cols, " | "),
			strings.Repeat("---|", len(first)), strings.Repeat("---:|", len(cols)))
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.name)
	}

	w("### Latency of one exec'd call (ms, p50 / p99)\n\n")
	w("Each point: hold N addresses, then K times {ADD a new container; DEL it}, every call timed from fork to exit; the plugins take turns call pair by call pair. ")
	w("The floors hold no addresses: *static-floor* reads stdin and prints a fixed result (no CNI library); *skel-floor* does the same through `skel` and the CNI types; ")
	w("*durable-floor* is the static floor plus what any crash-safe IPAM must pay: flock a file, write and fdatasync two 4 KiB pages; ")
	w("*skel-durable-floor* is the skel floor plus those writes: the least a crash-safe plugin on the CNI libraries can cost; *skel-bbolt-floor* is the skel floor plus one bbolt transaction (one key put or deleted): the least a plugin on skel and bbolt can cost; the *-1p* floors are the same binaries on one P from early initialisation, as hostlease runs.\n\n")
	for _, verb := range []string{"ADD", "DEL"} {
		w("%s:\n\n", verb)
		header([]string{"occupancy", "held", "K (in this order)"}, names)
		for _, r := range in.results {
			var ks []string
			for _, k := range r.k {
				ks = append(ks, fmt.Sprint(k))
			}
			w("| %s | %d | %s |", r.occ.label, r.occ.held, strings.Join(ks, ", "))
			for i := range ps {
				ds := samples(r.stats[i], verb)
				w(" %s / %s |", ms(p50(ds)), ms(percentile(ds, 0.99)))
			}
			w("\n")
		}
		w("\n")
	}

	w("### Ratios of p50 latencies to the durable floor\n\n")
	w("In brackets: the lowest and highest ratio over %d consecutive, time-aligned chunks of the samples (the spread under the machine's changing load). Target: hostlease / durable-floor <= %.1f, ADD and DEL, at every occupancy.\n\n", rounds, latencyTarget)
	var cols []string
	for _, i := range hleases {
		cols = append(cols, ps[i].name+" ADD", ps[i].name+" DEL")
	}
	cols = append(cols, "skel-durable-floor ADD", "skel-durable-floor DEL", "host-local ADD", "host-local DEL", "skel-floor ADD", "skel-floor DEL", "static-floor ADD", "static-floor DEL",
		fmt.Sprintf("target (hostlease <= %.1fx)", latencyTarget))
	header([]string{"occupancy (x durable-floor)"}, cols)
	for _, r := range in.results {
		st := r.stats
		w("| %s |", r.occ.label)
		for _, i := range append(slices.Clone(hleases), skelDurable, hostLocal, skel, static) {
			for _, verb := range []string{"ADD", "DEL"} {
				w(" %s |", cell(samples(st[i], verb), samples(st[durable], verb)))
			}
		}
		met := "met"
		for _, verb := range []string{"ADD", "DEL"} {
			if ratio(p50(samples(st[hostlease], verb)), p50(samples(st[durable], verb))) > latencyTarget {
				met = "NOT met"
			}
		}
		w(" %s |\n", met)
	}

	w("\n### Other ratios of p50 latencies\n\n")
	w("hostlease against the floor on the CNI libraries with the same durable writes and against the skel floor (the previous reference), what the CNI libraries and durability cost over the static floor, and host-local against hostlease.\n\n")
	header([]string{"occupancy"}, []string{"hostlease/skel-durable-floor ADD", "hostlease/skel-durable-floor DEL", "hostlease/skel-floor ADD", "hostlease/skel-floor DEL", "skel-floor/static-floor ADD", "skel-floor/static-floor DEL",
		"durable-floor/static-floor ADD", "durable-floor/static-floor DEL", "host-local/hostlease ADD", "host-local/hostlease DEL"})
	for _, r := range in.results {
		st := r.stats
		w("| %s |", r.occ.label)
		for _, pair := range [][2]int{{hostlease, skelDurable}, {hostlease, skel}, {skel, static}, {durable, static}, {hostLocal, hostlease}} {
			for _, verb := range []string{"ADD", "DEL"} {
				w(" %s |", cell(samples(st[pair[0]], verb), samples(st[pair[1]], verb)))
			}
		}
		w("\n")
	}

	// The floor of the issue-19 budget: a plugin on the same libraries as
	// hostlease (skel, encoding/json, one bbolt transaction).
	var bolts []int
	for i, p := range ps {
		if p.kind == kindSkelBboltFloor {
			bolts = append(bolts, i)
		}
	}
	w("\n### hostlease against the floor of a plugin on the same libraries\n\n")
	w("p50 of each hostlease build over the p50 of *skel-bbolt-floor* (skel, the config decoded with encoding/json into the CNI types, one bbolt transaction, the result printed by types.PrintResult) and of the same floor on one P as hostlease runs (*-1p*); in brackets the spread over %d time-aligned chunks. Budget: <= %.1fx; a ratio above it is marked **>%.1fx**.\n\n", rounds, boltBudget, boltBudget)
	cols = nil
	for _, h := range hleases {
		for _, f := range bolts {
			cols = append(cols, ps[h].name+"/"+ps[f].name+" ADD", ps[h].name+"/"+ps[f].name+" DEL")
		}
	}
	header([]string{"occupancy"}, cols)
	for _, r := range in.results {
		w("| %s |", r.occ.label)
		for _, h := range hleases {
			for _, f := range bolts {
				for _, verb := range []string{"ADD", "DEL"} {
					a, b := samples(r.stats[h], verb), samples(r.stats[f], verb)
					mark := ""
					if ratio(p50(a), p50(b)) > boltBudget {
						mark = fmt.Sprintf(" **>%.1fx**", boltBudget)
					}
					w(" %s%s |", cell(a, b), mark)
				}
			}
		}
		w("\n")
	}

	if len(hleases) > 1 {
		w("\n### hostlease builds against each other\n\n")
		w("p50 of each other build (-bench.variants, -bench.before) over hostlease's, wall time and CPU time (user+system) of the same calls, measured interleaved; in brackets the spread over %d time-aligned chunks. Below 1: the other build is faster.\n\n", rounds)
		cols = nil
		for _, h := range hleases[1:] {
			for _, what := range []string{"ADD wall", "ADD CPU", "DEL wall", "DEL CPU"} {
				cols = append(cols, ps[h].name+" "+what)
			}
		}
		header([]string{"occupancy (x hostlease)"}, cols)
		for _, r := range in.results {
			w("| %s |", r.occ.label)
			for _, h := range hleases[1:] {
				for _, verb := range []string{"ADD", "DEL"} {
					w(" %s |", cell(samples(r.stats[h], verb), samples(r.stats[hostlease], verb)))
					w(" %s |", cell(cpuSamples(r.stats[h], verb), cpuSamples(r.stats[hostlease], verb)))
				}
			}
			w("\n")
		}
	}

	w("\n### CPU time of one call (ms, p50, user+system of the plugin process)\n\n")
	w("Wall time minus CPU time is time spent blocked: fdatasync, the store lock, scheduling on a busy machine.\n\n")
	cols = nil
	for _, verb := range []string{"ADD", "DEL"} {
		for _, n := range names {
			cols = append(cols, n+" "+verb)
		}
	}
	header([]string{"occupancy"}, cols)
	for _, r := range in.results {
		w("| %s |", r.occ.label)
		for _, verb := range []string{"ADD", "DEL"} {
			for i := range ps {
				w(" %s |", ms(p50(cpuSamples(r.stats[i], verb))))
			}
		}
		w("\n")
	}

	w("\n### %d-way concurrent ADD+DEL throughput (calls/s)\n\n", *flagWorkers)
	w("%d processes at once, each %d times {ADD; DEL} with its own container, on an empty /16; calls/s = all calls / wall time; %d rounds, plugins taking turns.\n\n", *flagWorkers, *flagConcIt, rounds)
	header([]string{"plugin"}, []string{"calls/s (median of rounds)", "min-max", "/ durable-floor", "/ skel-durable-floor", "/ skel-floor"})
	dm, sdm, sm := median(in.tp.perRound[durable]), median(in.tp.perRound[skelDurable]), median(in.tp.perRound[skel])
	for i, pl := range ps {
		xs := in.tp.perRound[i]
		w("| %s | %.0f | %.0f-%.0f | %.2f | %.2f | %.2f |\n", pl.name, median(xs), slices.Min(xs), slices.Max(xs), median(xs)/dm, median(xs)/sdm, median(xs)/sm)
	}
	hsm := median(in.tp.perRound[hostlease])
	met := "met"
	if hsm < throughputTarget*dm {
		met = "NOT met"
	}
	w("\nhostlease / durable-floor: %.2f (target >= %.1f: %s); hostlease / host-local: %.2fx\n", hsm/dm, throughputTarget, met, hsm/median(in.tp.perRound[hostLocal]))
	for i, pl := range ps {
		switch pl.name {
		case "durable-floor-1p":
			w("\nhostlease / durable-floor-1p (the durable floor on one P, as hostlease runs): %.2f\n", hsm/median(in.tp.perRound[i]))
		case "skel-bbolt-floor", "skel-bbolt-floor-1p":
			what := "skel and one bbolt transaction per call"
			if strings.HasSuffix(pl.name, "-1p") {
				what += ", on one P as hostlease"
			}
			w("\nhostlease / %s (%s): %.2f; %s / durable-floor: %.2f\n", pl.name, what, hsm/median(in.tp.perRound[i]), pl.name, median(in.tp.perRound[i])/dm)
		}
	}

	renderSweeps(w, in.sweeps, in.sweepLoad)
	renderSweepLoad(w, in.sweepLoad)

	if len(in.fills) > 0 {
		w("\n### How the pools were filled\n\n| occupancy | plugin | method | held | wall time | exec'd calls/s |\n|---|---|---|---:|---:|---:|\n")
		for _, f := range in.fills {
			rate := "-"
			if f.calls > 0 {
				rate = fmt.Sprintf("%.0f", float64(f.calls)/f.wall.Seconds())
			}
			w("| %s | %s | %s | %d | %s | %s |\n", f.point, f.plugin, f.method, f.held, f.wall.Round(10*time.Millisecond), rate)
		}
	}

	w("\n### Machine\n\n")
	w("- nproc %d, %s, kernel %s, %s\n", runtime.NumCPU(), cpuModel(), kernel(), runtime.Version())
	w("- state dir on %s\n", fsDescription(in.dir))
	w("- load average at start %s, at end %s", in.loadStart, in.loadEnd)
	if in.loadN > 0 {
		w("; 1-minute load sampled every 10 s during the run (%d samples): min %.2f, median %.2f, max %.2f", in.loadN, in.loadLo, in.loadMed, in.loadHi)
	}
	w("\n")
	var sizes []string
	for _, p := range ps {
		sizes = append(sizes, fmt.Sprintf("%s %.1f MB", p.name, float64(p.size)/1e6))
	}
	w("- binaries (stripped): %s\n", strings.Join(sizes, ", "))
	return b.String()
}

// sweepTarget is the budget for a sweep over 10 000 records, not
// counting the CRI call.
const sweepTarget = 100 * time.Millisecond

func renderSweeps(w func(string, ...any), sweeps []sweepBench, sl *sweepLoadResult) {
	if len(sweeps) == 0 {
		return
	}
	w("\n### Sweep of 10 000 records (ms per sweep)\n\n")
	w("`go test -run '^$' -bench Sweep10k -benchtime 20x ./pkg/daemon/`: one `Sweeper.Sweep` in process over a store of 10 000 allocations ")
	w("(half of them READY sandboxes, half absent from CRI and too young to reclaim, each with a netns path to stat), ")
	w("against an in-process fake CRI that answers at once: the sweep without the CRI call. Target: < 100 ms plus the CRI call.\n\n")
	w("| benchmark | sweep | iterations | ms per sweep | target (< 100 ms + CRI) |\n|---|---|---:|---:|---|\n")
	for _, sb := range sweeps {
		what := sb.name
		switch sb.name {
		case "BenchmarkSweep10k":
			what = "steady state of a running daemon: records unchanged since the last sweep are not decoded again, unchanged observations not rewritten"
		case "BenchmarkSweep10kCold":
			what = "first sweep of a new daemon over a freshly written store: every record decoded; the absent half's first miss written, the listed half's sandbox state for at most 1 000 records (one transaction)"
		}
		met := "met"
		if time.Duration(sb.ns) >= sweepTarget {
			met = "NOT met"
		}
		if sb.name == "BenchmarkSweep10kReadLock" {
			// Not a sweep: how long one steady-state snapshot read holds
			// the store's shared lock, which a plugin call may wait for.
			what, met = "not a sweep: the time one steady-state snapshot read holds the store's shared lock (a plugin call arriving then waits)", "-"
		}
		w("| %s | %s | %d | %.1f | %s |\n", sb.name, what, sb.iters, sb.ns/1e6, met)
	}
	if sl != nil && sl.sweepCount > 0 {
		w("\nThe real daemon below (`hostlease-gc run`, gRPC CRI listing %d sandboxes, plugin calls running): %.1f ms per sweep on average, CRI call included (`hostlease_sweep_duration_seconds`, %.0f sweeps).\n",
			sl.listed, 1000*sl.sweepSum/sl.sweepCount, sl.sweepCount)
	}
}

func renderSweepLoad(w func(string, ...any), sl *sweepLoadResult) {
	if sl == nil {
		return
	}
	w("\n### ADD and DEL latency while hostlease-gc sweeps (ms)\n\n")
	w("A store of %d records filled through hostlease's exec'd ADD; a gRPC CRI server lists %d of their sandboxes READY, the others are absent ", sl.records, sl.listed)
	w("(leak candidates the daemon keeps observing; `--min-age %s --grace %s` so it reclaims none). ", sweepLoadMinAge, sweepLoadMinAge)
	w("%d ADD+DEL pairs (a new container each, every call timed from fork to exit) (i) with no daemon and (ii) while `hostlease-gc run --interval %s --no-api` sweeps the data dir, ", sl.k, sl.interval)
	w("in %d rounds alternating (i) and (ii) (order swapped every round); each (ii) round starts a new daemon and waits for 5 ok sweeps before timing.\n\n", sl.rounds)
	w("| mode | K | ADD p50 / p99 | DEL p50 / p99 | ADD CPU p50 | DEL CPU p50 |\n|---|---:|---:|---:|---:|---:|\n")
	row := func(label string, s stat) {
		w("| %s | %d | %s / %s | %s / %s | %s | %s |\n", label, len(s.add),
			ms(percentile(s.add, 0.5)), ms(percentile(s.add, 0.99)), ms(percentile(s.del, 0.5)), ms(percentile(s.del, 0.99)),
			ms(percentile(s.addCPU, 0.5)), ms(percentile(s.delCPU, 0.5)))
	}
	row("(i) no daemon", sl.off)
	row("(ii) hostlease-gc sweeping", sl.on)
	spread := func(rounds [][2]time.Duration) string {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range rounds {
			if r[0] > 0 && r[1] > 0 {
				x := ratio(r[1], r[0])
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
		}
		if math.IsInf(lo, 0) {
			return ""
		}
		return fmt.Sprintf(" [%.2f-%.2f]", lo, hi)
	}
	q := func(a, b []time.Duration, p float64) float64 { return ratio(percentile(a, p), percentile(b, p)) }
	w("| (ii)/(i) | | p50 %.2f%s, p99 %.2f | p50 %.2f%s, p99 %.2f | %.2f | %.2f |\n",
		q(sl.on.add, sl.off.add, 0.5), spread(sl.roundAdd), q(sl.on.add, sl.off.add, 0.99),
		q(sl.on.del, sl.off.del, 0.5), spread(sl.roundDel), q(sl.on.del, sl.off.del, 0.99),
		q(sl.on.addCPU, sl.off.addCPU, 0.5), q(sl.on.delCPU, sl.off.delCPU, 0.5))
	w("\nIn brackets: the lowest and highest per-round ratio of p50s. ")
	busy := 0.0
	if sl.windowWall > 0 {
		busy = 100 * sl.sweepSum / sl.windowWall.Seconds()
	}
	mean := 0.0
	if sl.sweepCount > 0 {
		mean = 1000 * sl.sweepSum / sl.sweepCount
	}
	w("During the timed (ii) windows (%s in all) the daemon finished %.0f sweeps with result ok and %.0f failed, %.1f ms per sweep on average, sweeping %.0f %% of the time; %d ListPodSandbox calls over the whole measurement.\n",
		sl.windowWall.Round(10*time.Millisecond), sl.sweepsOK, sl.sweepsKO, mean, busy, sl.criLists)
}

func reportMetrics(b *testing.B, plugins []*plugin, results []pointResult, tp throughputResult, sl *sweepLoadResult) {
	durable, hostlease := indexOf(plugins, kindDurableFloor), indexOf(plugins, kindHostlease)
	for i, r := range results {
		s := r.stats
		b.ReportMetric(ratio(percentile(s[hostlease].add, 0.5), percentile(s[durable].add, 0.5)), fmt.Sprintf("hostlease/durable-ADD-p50-point%d", i))
		b.ReportMetric(ratio(percentile(s[hostlease].del, 0.5), percentile(s[durable].del, 0.5)), fmt.Sprintf("hostlease/durable-DEL-p50-point%d", i))
	}
	b.ReportMetric(median(tp.perRound[hostlease])/median(tp.perRound[durable]), "hostlease/durable-calls/s")
	if sl != nil {
		b.ReportMetric(ratio(percentile(sl.on.add, 0.5), percentile(sl.off.add, 0.5)), "sweeping/idle-ADD-p50")
		b.ReportMetric(ratio(percentile(sl.on.add, 0.99), percentile(sl.off.add, 0.99)), "sweeping/idle-ADD-p99")
	}
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "cpu ?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "cpu ?"
}
