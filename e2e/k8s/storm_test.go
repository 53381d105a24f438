package k8s

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

var stormOut = flag.String("storm.out", "", "BenchmarkRetryStorm: write its report (markdown) to this file")

// stormPoolSize is what a /24 pool offers: 256 addresses minus the network
// address, the broadcast address and the bridge's gateway.
const stormPoolSize = 253

// BenchmarkRetryStorm (make bench-k8s; not in make test): 50 pods whose
// chain [bridge(hostlease), failplugin, marker] fails ADD and DEL, on the
// node's /24, for 5 minutes, under the DaemonSet's shipped settings. Every
// kubelet retry is a new sandbox whose address leaks; the daemon reclaims
// them. Measured (see docs/benchmarks.md, "Retry storm on a real Kubernetes
// node", for the definitions):
//   - leaks: sandboxes whose ADD wrote a record and whose DEL failed;
//   - leak-to-reclaim: the store's audit entry `reclaim` of the sandbox's
//     address minus the time of the sandbox's failed ADD (failplugin's log
//     line, written right after the IPAM plugin stored the record);
//     teardown-to-reclaim: the same from the sandbox's first failed DEL;
//   - peak pending: the most leaks held at once, exactly, from those
//     intervals ([first failed DEL, reclaim]); and the most addresses held by
//     failed attempts at once ([ADD, reclaim]), which includes ADDs in
//     flight;
//   - never exhausted (asserted): every ADD got an address (the store's
//     exhaustion count stays 0), the peak held stays below the pool's 253,
//     and once the chain heals all 50 pods run.
//
// HOSTLEASE_STORM_PODS and HOSTLEASE_STORM_DURATION shorten it for a try.
func BenchmarkRetryStorm(b *testing.B) {
	c := cluster(b)
	pods, duration := 50, 5*time.Minute
	if v, err := strconv.Atoi(os.Getenv("HOSTLEASE_STORM_PODS")); err == nil && v > 0 {
		pods = v
	}
	if v, err := time.ParseDuration(os.Getenv("HOSTLEASE_STORM_DURATION")); err == nil && v > 0 {
		duration = v
	}
	ensureInstalled(b, c)
	waitNodeReady(b, c)
	const ns = "bench-storm"
	failLog := filepath.Join(Root, "storm-failplugin.log")
	_ = os.Remove(failLog)
	start := time.Now()
	startCrashLoop(b, c, ns, "storm", pods, map[string]any{"logFile": failLog})
	b.ResetTimer()
	sampledPeak := 0
	stormStart := time.Now()
	for time.Since(stormStart) < duration {
		pending := 0
		for _, r := range records(b) {
			if r.PodNamespace == ns && strings.HasPrefix(r.PodName, "storm-") && r.State == allocator.StatePending {
				pending++
			}
		}
		sampledPeak = max(sampledPeak, pending)
		time.Sleep(2 * time.Second) // the sampling period
	}
	end := time.Now()
	// Heal: every pod gets an address and runs; every leak is reclaimed.
	healChain()
	waitPodsRunning(b, c, ns, pods+1)
	b.StopTimer()

	attempts := readFailLog(b, failLog, start, end)
	waitUntil(b, 5*time.Minute, "every leak reclaimed", func() (bool, string) {
		n := 0
		for _, r := range records(b) {
			if a, ok := attempts[r.ContainerID]; ok && !a.del.IsZero() {
				n++
			}
		}
		return n == 0, itoa(n) + " leaks still held"
	})
	for _, ev := range auditLog(b) {
		if a, ok := attempts[ev.ContainerID]; ok && ev.Action == "reclaim" && !ev.Time.Before(start) {
			if !a.reclaim.IsZero() {
				b.Errorf("sandbox %s reclaimed twice (%s, %s)", ev.ContainerID[:12], a.reclaim, ev.Time)
			}
			a.reclaim = ev.Time
		}
	}
	var fromAdd, fromDel []time.Duration
	var leakSpans, heldSpans [][2]time.Time
	for id, a := range attempts {
		if a.del.IsZero() {
			continue // its DEL never ran in the window: not (yet) a leak
		}
		if a.reclaim.IsZero() {
			b.Errorf("leak of sandbox %s (failed ADD %s) never reclaimed", id[:12], a.add.Format(time.RFC3339Nano))
			continue
		}
		fromAdd = append(fromAdd, a.reclaim.Sub(a.add))
		fromDel = append(fromDel, max(0, a.reclaim.Sub(a.del)))
		leakSpans = append(leakSpans, [2]time.Time{a.del, a.reclaim})
		heldSpans = append(heldSpans, [2]time.Time{a.add, a.reclaim})
	}
	if len(fromAdd) == 0 {
		b.Fatal("no leak in the storm: the failing chain did not reproduce #12130")
	}
	peak, peakHeld := maxOverlap(leakSpans), maxOverlap(heldSpans)
	exhaustions := storeExhaustions(b)
	if exhaustions != 0 {
		b.Errorf("the pool was exhausted %d times during the storm", exhaustions)
	}
	if peakHeld+pods+1 >= stormPoolSize {
		b.Errorf("up to %d addresses held by failed attempts with %d pods: the /24's %d addresses were nearly all gone", peakHeld, pods+1, stormPoolSize)
	}

	r := stormReport{Pods: pods, Duration: end.Sub(stormStart).Round(time.Second), Leaks: len(fromAdd),
		PeakPending: peak, PeakHeld: peakHeld, SampledPeak: sampledPeak,
		AddP50: pct(fromAdd, 50), AddP99: pct(fromAdd, 99), AddMax: pct(fromAdd, 100),
		DelP50: pct(fromDel, 50), DelP99: pct(fromDel, 99), DelMax: pct(fromDel, 100), Exhaustions: exhaustions}
	b.ReportMetric(float64(r.Leaks), "leaks")
	b.ReportMetric(float64(r.PeakPending), "peak-pending")
	b.ReportMetric(r.AddP50.Seconds(), "p50-leak-to-reclaim-s")
	b.ReportMetric(r.AddP99.Seconds(), "p99-leak-to-reclaim-s")
	fmt.Fprint(os.Stderr, r.markdown())
	if *stormOut != "" {
		if err := os.WriteFile(*stormOut, []byte(r.markdown()), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// attempt is one sandbox of the storm, from the failplugin's log.
type attempt struct {
	add, del, reclaim time.Time // failed ADD, first failed DEL, reclaim (audit)
}

// readFailLog reads the failplugin's log: per sandbox, its failed ADD and
// first failed DEL in [from, to].
func readFailLog(t testing.TB, path string, from, to time.Time) map[string]*attempt {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]*attempt{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Time        time.Time `json:"time"`
			Verb        string    `json:"verb"`
			ContainerID string    `json:"containerID"`
			Error       string    `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Error == "" || l.Time.Before(from) {
			continue
		}
		a := out[l.ContainerID]
		switch {
		case strings.EqualFold(l.Verb, "ADD") && !l.Time.After(to):
			if a == nil {
				a = &attempt{}
				out[l.ContainerID] = a
			}
			a.add = l.Time
		case strings.EqualFold(l.Verb, "DEL") && a != nil && a.del.IsZero():
			a.del = l.Time
		}
	}
	return out
}

// maxOverlap is the most spans open at one instant (a span closes before
// another opens at the same instant).
func maxOverlap(spans [][2]time.Time) int {
	type edge struct {
		t time.Time
		d int
	}
	var es []edge
	for _, s := range spans {
		es = append(es, edge{s[0], 1}, edge{s[1], -1})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].t.Equal(es[j].t) {
			return es[i].d < es[j].d
		}
		return es[i].t.Before(es[j].t)
	})
	n, peak := 0, 0
	for _, e := range es {
		n += e.d
		peak = max(peak, n)
	}
	return peak
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)]
}

// storeExhaustions is the node network's exhaustion count (hostlease-gc status).
func storeExhaustions(t testing.TB) uint64 { return networkExhaustions(t, PodNetwork) }

type stormReport struct {
	Pods                         int
	Duration                     time.Duration
	Leaks, PeakPending, PeakHeld int
	SampledPeak                  int
	AddP50, AddP99, AddMax       time.Duration
	DelP50, DelP99, DelMax       time.Duration
	Exhaustions                  uint64
}

func (r stormReport) markdown() string {
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
	return fmt.Sprintf(`| pods | storm | leaks | peak pending (exact / sampled 2 s) | peak held by failed attempts | leak-to-reclaim p50 / p99 / max (s) | teardown-to-reclaim p50 / p99 / max (s) | exhaustions of the /24 (253) |
|---|---|---|---|---|---|---|---|
| %d | %v | %d | %d / %d | %d | %s / %s / %s | %s / %s / %s | %d |
`, r.Pods, r.Duration, r.Leaks, r.PeakPending, r.SampledPeak, r.PeakHeld,
		sec(r.AddP50), sec(r.AddP99), sec(r.AddMax), sec(r.DelP50), sec(r.DelP99), sec(r.DelMax), r.Exhaustions)
}
