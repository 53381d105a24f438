package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
)

// The metrics a sweep exports over a store's life: exhaustion counts, pool
// gauges, sweep results, store errors, a removed network.

func TestSweepMetricsExhaustionAndResults(t *testing.T) {
	e := newSweepEnv(t)
	e.ranges = []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: addr("10.1.0.10"), End: addr("10.1.0.12"),
	}}}}
	created := t0.Add(-time.Hour)
	for _, id := range []string{"a", "b", "c"} {
		r := e.alloc(id, created)
		e.cri.set(id, reclaim.SandboxReady, r.IP)
	}
	failADD := func(at time.Time) {
		t.Helper()
		if _, cerr := e.tryAlloc(allocator.Owner{ContainerID: "sb-fail", IfName: "eth0"}, at); cerr == nil || cerr.Code != allocator.ErrRangeExhausted {
			t.Fatalf("ADD on a full pool: %v, want exhaustion", cerr)
		}
	}
	failures := func() float64 {
		return e.metric("hostlease_allocation_failures_total", "network", testNet, "range_set", "0", "reason", FailureExhausted)
	}
	lastExh := func() float64 {
		return e.metric("hostlease_last_exhaustion_timestamp_seconds", "network", testNet, "range_set", "0")
	}

	e.sweepAt(t0)
	if got := failures(); got != 0 {
		t.Fatalf("failures before any = %v", got)
	}
	if s, f := e.metric("hostlease_pool_size_addresses", "network", testNet, "range_set", "0"), e.metric("hostlease_pool_free_addresses", "network", testNet, "range_set", "0"); s != 3 || f != 0 {
		t.Fatalf("pool size/free = %v/%v, want 3/0", s, f)
	}

	failADD(t0.Add(10 * time.Second))
	failADD(t0.Add(20 * time.Second))
	e.sweepAt(t0.Add(time.Minute))
	if got := failures(); got != 2 {
		t.Fatalf("failures after two exhausted ADDs = %v, want 2", got)
	}
	if got, want := lastExh(), float64(t0.Add(20*time.Second).Unix()); got != want {
		t.Fatalf("last exhaustion = %v, want %v", got, want)
	}
	// The store's count is cumulative: sweeps without new failures add nothing.
	e.sweepAt(t0.Add(2 * time.Minute))
	e.sweepAt(t0.Add(3 * time.Minute))
	if got := failures(); got != 2 {
		t.Fatalf("failures after quiet sweeps = %v, want still 2 (double counted)", got)
	}
	failADD(t0.Add(200 * time.Second))
	e.sweepAt(t0.Add(4 * time.Minute))
	if got := failures(); got != 3 {
		t.Fatalf("failures after a third exhausted ADD = %v, want 3", got)
	}

	// A pod goes away: its address becomes a leak candidate, then free.
	e.cri.remove("c")
	e.sweepAt(t0.Add(5 * time.Minute))
	if got := e.metric("hostlease_leak_candidates", "network", testNet); got != 1 {
		t.Fatalf("leak candidates = %v, want 1", got)
	}
	e.sweepAt(t0.Add(6 * time.Minute))
	e.sweepAt(t0.Add(7 * time.Minute))
	if lc, free, rec := e.metric("hostlease_leak_candidates", "network", testNet), e.metric("hostlease_pool_free_addresses", "network", testNet, "range_set", "0"), e.reclaims(reclaim.ReleaseSandboxAbsent); lc != 0 || free != 1 || rec != 1 {
		t.Fatalf("after the reclaim: leak candidates %v free %v reclaims %v, want 0 1 1", lc, free, rec)
	}
	if c := e.metric("hostlease_allocations", "network", testNet, "state", StateCommitted); c != 2 {
		t.Fatalf("allocations committed = %v, want 2", c)
	}

	// Sweep results: a store that cannot be decoded is a store error.
	bad := store.FilePath(e.dir, "other")
	st, err := store.Open(bad, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := bolt.Open(bad, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("allocs")).Put([]byte{4, 10, 2, 0, 1}, []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	rep := e.sweepAt(t0.Add(8 * time.Minute))
	// A record that does not decode is quarantined, not a store error: the
	// network is swept and the damage exported.
	if rep.Result != SweepOK {
		t.Fatalf("sweep with an undecodable record: result %s, want ok", rep.Result)
	}
	if got := e.metric("hostlease_damaged_records", "network", "other"); got != 1 {
		t.Fatalf("damaged_records{other} = %v, want 1", got)
	}
	os.Remove(bad)
	// An environment error (a symlink in place of a store: ELOOP) is a store
	// error, counted with its errno; the store is neither set aside nor
	// rebuilt, and nothing is created at the link's target.
	link := store.FilePath(e.dir, "envfail")
	target := filepath.Join(t.TempDir(), "target.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	rep = e.sweepAt(t0.Add(8*time.Minute + time.Second))
	if rep.Result != SweepStoreError {
		t.Fatalf("sweep with a symlinked store: result %s, want store_error", rep.Result)
	}
	if got := e.metric("hostlease_store_errors_total", "network", "envfail", "class", ClassEnvironment, "errno", "ELOOP"); got != 1 {
		t.Fatalf("store_errors_total{envfail,environment,ELOOP} = %v, want 1\n%s", got, e.logs.String())
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a store was created at the symlink's target: %v", err)
	}
	if m, _ := filepath.Glob(link + ".corrupt-*"); len(m) != 0 {
		t.Fatalf("an environment error set the store aside: %v", m)
	}
	if got := e.metric("hostlease_sweeps_total", "result", SweepStoreError); got != 1 {
		t.Fatalf("sweeps{store_error} = %v, want 1", got)
	}
	os.Remove(link)
	// The healthy network was still swept and exported.
	if got := e.metric("hostlease_pool_free_addresses", "network", testNet, "range_set", "0"); got != 1 {
		t.Fatalf("healthy network's pool free = %v during another store's error", got)
	}
	os.Remove(bad)

	e.cri.setListErr(errors.New("down"))
	e.sweepAt(t0.Add(9 * time.Minute))
	if ok, cri, up := e.metric("hostlease_sweeps_total", "result", SweepOK), e.metric("hostlease_sweeps_total", "result", SweepCRIError), e.metric("hostlease_cri_up"); ok != 9 || cri != 1 || up != 0 {
		t.Fatalf("sweeps ok=%v cri_error=%v cri_up=%v, want 9 1 0", ok, cri, up)
	}
	if n, err := testutil.GatherAndCount(e.reg, "hostlease_sweep_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("sweep duration series %d (%v)", n, err)
	}
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP hostlease_sweeps_total Sweeps run, by result (ok, cri_error, store_error).
# TYPE hostlease_sweeps_total counter
hostlease_sweeps_total{result="cri_error"} 1
hostlease_sweeps_total{result="ok"} 9
hostlease_sweeps_total{result="store_error"} 1
`), "hostlease_sweeps_total"); err != nil {
		t.Fatal(err)
	}

	// A restarted daemon exports the store's cumulative count once.
	reg2 := prometheus.NewRegistry()
	e2 := &Sweeper{Opts: e.s.Opts, CRI: newFakeCRI(), Metrics: NewMetrics(reg2), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: e.s.Now}
	e2.Sweep(context.Background())
	e2.Sweep(context.Background())
	if got := gathered(t, reg2, "hostlease_allocation_failures_total", "network", testNet, "range_set", "0", "reason", FailureExhausted); got != 3 {
		t.Fatalf("restarted daemon: failures = %v, want 3", got)
	}
}

// A network removed from the node (its store deleted) stops being exported:
// its last pool gauges would otherwise keep the exhaustion alerts firing.
func TestSweepForgetsRemovedNetwork(t *testing.T) {
	e := newSweepEnv(t)
	r := e.alloc("sb-a", t0.Add(-time.Hour))
	e.cri.set("sb-a", reclaim.SandboxReady, r.IP)
	other := store.FilePath(e.dir, "gone")
	st, err := store.Open(other, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(func(tx *store.Tx) error {
		if err := tx.SetRangeSets(testRanges); err != nil {
			return err
		}
		return tx.RecordExhaustion(0, "10.1.0.10-10.1.0.200", t0)
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	e.sweepAt(t0)
	if got := e.metric("hostlease_pool_size_addresses", "network", "gone", "range_set", "0"); got != 191 {
		t.Fatalf("pool size of network gone = %v before removal", got)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	e.sweepAt(t0.Add(time.Minute))
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var stale, kept []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "network" && l.GetValue() == "gone" {
					stale = append(stale, mf.GetName())
				}
				if l.GetName() == "network" && l.GetValue() == testNet && mf.GetName() == "hostlease_pool_size_addresses" {
					kept = append(kept, mf.GetName())
				}
			}
		}
	}
	if len(stale) > 0 {
		t.Fatalf("series of the removed network remain: %v", stale)
	}
	if len(kept) != 1 {
		t.Fatalf("the remaining network's pool size series is gone too")
	}
}

// The gauges a sweep exports are the store as that sweep leaves it: an
// imported host-local reservation the sweep released (its file gone) is free
// in hostlease_pool_free_addresses (what the exhaustion alert reads) and no
// longer counted in hostlease_allocations, already in that sweep's export, as
// the next sweep reads them from the store.
func TestSweepGaugesCreditHostLocalReleasesOfTheSweep(t *testing.T) {
	e := newSweepEnv(t)
	hl := writeHostLocal(t, e, "10.1.0.50", "10.1.0.51")
	for _, f := range []string{"10.1.0.50", "10.1.0.51"} {
		e.cri.set("ctr-"+f, reclaim.SandboxReady, addr(f))
	}
	live := e.alloc("sb-live", t0.Add(-time.Hour)) // creates the store
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	e.update(func(tx *store.Tx) error {
		_, err := allocator.ImportHostLocal(tx, hl, testNet, testRanges, t0.Add(-time.Hour))
		return err
	})
	type gauges struct{ free, committed, pending float64 }
	read := func() gauges {
		return gauges{
			free:      e.metric("hostlease_pool_free_addresses", "network", testNet, "range_set", "0"),
			committed: e.metric("hostlease_allocations", "network", testNet, "state", "committed"),
			pending:   e.metric("hostlease_allocations", "network", testNet, "state", "pending"),
		}
	}
	e.sweepAt(t0)
	before := read()

	// host-local's DEL removed its file; the runtime no longer lists the sandbox.
	if err := os.Remove(hl + "/10.1.0.50"); err != nil {
		t.Fatal(err)
	}
	e.cri.remove("ctr-10.1.0.50")
	if nr := e.net(e.sweepAt(t0.Add(time.Second))); len(nr.HostLocalReleased) != 1 {
		t.Fatalf("the sweep released %v, want 10.1.0.50", nr.HostLocalReleased)
	}
	releasing := read()
	e.sweepAt(t0.Add(2 * time.Second))
	next := read()

	if releasing.free != before.free+1 {
		t.Errorf("pool_free_addresses after the sweep that released 10.1.0.50 = %v, want %v (the release credited)", releasing.free, before.free+1)
	}
	if releasing.committed+releasing.pending != before.committed+before.pending-1 {
		t.Errorf("allocations after the release = %+v, before %+v: want one fewer", releasing, before)
	}
	if releasing != next {
		t.Errorf("gauges of the releasing sweep %+v differ from the next sweep's %+v (read from the store)", releasing, next)
	}
}
