package daemon

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/pool"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// contractMetrics is docs/contracts.md's metrics table: name -> type, labels.
var contractMetrics = map[string]struct {
	typ    string
	labels []string
}{
	"hostlease_build_info":                              {"gauge", []string{"goversion", "version"}},
	"hostlease_pool_size_addresses":                     {"gauge", []string{"network", "range_set"}},
	"hostlease_pool_free_addresses":                     {"gauge", []string{"network", "range_set"}},
	"hostlease_allocations":                             {"gauge", []string{"network", "state"}},
	"hostlease_leak_candidates":                         {"gauge", []string{"network"}},
	"hostlease_reclaims_total":                          {"counter", []string{"network", "reason"}},
	"hostlease_vetoes_total":                            {"counter", []string{"network", "reason"}},
	"hostlease_reclaim_guard_tripped_total":             {"counter", []string{"network"}},
	"hostlease_allocation_failures_total":               {"counter", []string{"network", "range_set", "reason"}},
	"hostlease_last_exhaustion_timestamp_seconds":       {"gauge", []string{"network", "range_set"}},
	"hostlease_sweeps_total":                            {"counter", []string{"result"}},
	"hostlease_sweep_duration_seconds":                  {"histogram", nil},
	"hostlease_last_successful_sweep_timestamp_seconds": {"gauge", nil},
	"hostlease_cri_up":                                  {"gauge", nil},
	"hostlease_stores_rebuilt_total":                    {"counter", []string{"network"}},
	"hostlease_store_errors_total":                      {"counter", []string{"class", "errno", "network"}},
	"hostlease_damaged_records":                         {"gauge", []string{"network"}},
	"hostlease_addresses_rereserved_total":              {"counter", []string{"network", "reason"}},
	"hostlease_address_conflicts_total":                 {"counter", []string{"network"}},
	"hostlease_index_repairs_total":                     {"counter", []string{"network"}},
	"hostlease_plugin_releases_total":                   {"counter", []string{"network", "reason"}},
	"hostlease_netns_dir_verified":                      {"gauge", nil},
	"hostlease_data_dir_ok":                             {"gauge", nil},
	"hostlease_netns_unverified_records":                {"gauge", []string{"network"}},
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rec is a record of network podnet at 10.1.0.<i> in range set 0.
func rec(i int, state allocator.State) *allocator.Record {
	return &allocator.Record{IP: netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), ContainerID: fmt.Sprintf("sb-%d", i), State: state}
}

func usage(rs, size, used int) pool.Usage {
	return pool.Usage{RangeSet: rs, Size: big.NewInt(int64(size)), Used: used}
}

// populate hands m two sweeps over network podnet: one that did a bit of
// everything, then one whose CRI call failed and that could not read the
// store (the gauges keep what the first saw).
func populate(m *Metrics) {
	var reclaimed []ReclaimedRecord
	for i := range 5 {
		reclaimed = append(reclaimed, ReclaimedRecord{Record: rec(100+i, allocator.StateCommitted), Reason: reclaim.ReleaseSandboxAbsent})
	}
	// Committed: two records and one re-reserved address.
	decisions := []reclaim.Decision{
		{Record: rec(10, allocator.StatePending), Obs: allocator.Observation{Misses: 1}, Candidate: true},
		{Record: rec(11, allocator.StateCommitted), Obs: allocator.Observation{Misses: 3}, Candidate: true, Reason: reclaim.KeepVetoed},
		{Record: rec(12, allocator.StateCommitted), Reason: reclaim.KeepLive},
	}
	m.Observe(&SweepReport{Result: SweepOK, CRIReached: true, Duration: 12 * time.Millisecond, Networks: []*NetworkReport{{
		NetworkObservation: NetworkObservation{
			Network: "podnet",
			Snapshot: &Snapshot{
				Usage:       []pool.Usage{usage(0, 254, 9), usage(1, 65534, 4)},
				RangeSets:   make([]allocator.StoredRangeSet, 2),
				Exhaustions: map[int]allocator.Exhaustion{0: {Count: 2, Last: time.Unix(1700000000, 0)}},
				Damaged:     make([]allocator.DamagedRecord, 2),
			},
		},
		NetworkDecision: NetworkDecision{
			Verdict:   reclaim.Verdict{Decisions: decisions, Guarded: true},
			ReReserve: []reclaim.ReReserve{{IP: addr("10.9.0.1"), Reason: reclaim.ReReserveUnrecorded}, {IP: addr("10.9.0.2"), Reason: reclaim.ReReserveOtherOwner, Conflict: true}},
		},
		NetworkOutcome: NetworkOutcome{
			Reclaimed:  reclaimed,
			Rebuilt:    "podnet.db.corrupt-1",
			ReReserved: []reclaim.ReReserve{{IP: addr("10.9.0.1"), Reason: reclaim.ReReserveUnrecorded}},
			WriteErr:   &store.IOError{Op: "write", Path: "podnet.db", Err: syscall.EROFS},
		},
	}}}, time.Unix(1700000100, 500000000))
	m.Observe(&SweepReport{Result: SweepCRIError, Duration: 3 * time.Second, Networks: []*NetworkReport{{
		NetworkObservation: NetworkObservation{Network: "podnet", ReadErr: errors.New("store is busy")},
	}}}, time.Unix(1700000130, 0))
}

func TestMetricsContract(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	populate(m)

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: err=%v problems=%v", err, problems)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		want, ok := contractMetrics[mf.GetName()]
		if !ok {
			t.Errorf("metric %s is not in docs/contracts.md", mf.GetName())
			continue
		}
		seen[mf.GetName()] = true
		if got := strings.ToLower(mf.GetType().String()); got != want.typ {
			t.Errorf("%s: type %s, contract says %s", mf.GetName(), got, want.typ)
		}
		for _, metric := range mf.GetMetric() {
			var names []string
			for _, lp := range metric.GetLabel() {
				names = append(names, lp.GetName())
			}
			if strings.Join(names, ",") != strings.Join(want.labels, ",") {
				t.Errorf("%s: labels %v, contract says %v", mf.GetName(), names, want.labels)
			}
		}
	}
	for name := range contractMetrics {
		if !seen[name] {
			t.Errorf("contract metric %s not exported", name)
		}
	}

	text := scrape(t, reg)
	for _, line := range []string{
		`hostlease_build_info{goversion="` + runtime.Version() + `",version="` + Version + `"} 1`,
		`hostlease_pool_size_addresses{network="podnet",range_set="0"} 254`,
		`hostlease_pool_free_addresses{network="podnet",range_set="1"} 65530`,
		`hostlease_allocations{network="podnet",state="pending"} 1`,
		`hostlease_allocations{network="podnet",state="committed"} 3`,
		`hostlease_leak_candidates{network="podnet"} 2`,
		`hostlease_reclaims_total{network="podnet",reason="sandbox_absent"} 5`,
		`hostlease_reclaims_total{network="podnet",reason="netns_gone"} 0`,
		`hostlease_vetoes_total{network="podnet",reason="pod_lists_ip"} 1`,
		`hostlease_reclaim_guard_tripped_total{network="podnet"} 1`,
		`hostlease_allocation_failures_total{network="podnet",range_set="0",reason="exhausted"} 2`,
		`hostlease_allocation_failures_total{network="podnet",range_set="1",reason="exhausted"} 0`,
		`hostlease_last_exhaustion_timestamp_seconds{network="podnet",range_set="0"} 1.7e+09`,
		`hostlease_sweeps_total{result="ok"} 1`,
		`hostlease_sweeps_total{result="cri_error"} 1`,
		`hostlease_sweeps_total{result="store_error"} 0`,
		`hostlease_sweep_duration_seconds_bucket{le="0.025"} 1`,
		`hostlease_sweep_duration_seconds_bucket{le="+Inf"} 2`,
		`hostlease_sweep_duration_seconds_count 2`,
		`hostlease_last_successful_sweep_timestamp_seconds 1.7000001005e+09`,
		`hostlease_cri_up 0`,
		`hostlease_stores_rebuilt_total{network="podnet"} 1`,
		`hostlease_store_errors_total{class="environment",errno="EROFS",network="podnet"} 1`,
		`hostlease_damaged_records{network="podnet"} 2`,
		`hostlease_addresses_rereserved_total{network="podnet",reason="unrecorded"} 1`,
		`hostlease_addresses_rereserved_total{network="podnet",reason="other_owner"} 0`,
		`hostlease_reclaims_total{network="podnet",reason="predates_boot"} 0`,
		`hostlease_address_conflicts_total{network="podnet"} 1`,
	} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("scrape lacks line %q", line)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", text)
	}
}

func TestSweepBuckets(t *testing.T) {
	b := SweepDurationBuckets
	if b[0] > 0.001 || b[len(b)-1] < 30 {
		t.Fatalf("buckets %v do not span 1ms..30s", b)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			t.Fatalf("buckets not increasing: %v", b)
		}
	}
}

// swept is a report of one sweep that read every network of pools
// (network -> its range sets' sizes, none used).
func swept(pools map[string][]int) *SweepReport {
	rep := &SweepReport{Result: SweepOK, CRIReached: true}
	for network, sizes := range pools {
		snap := &Snapshot{RangeSets: make([]allocator.StoredRangeSet, len(sizes))}
		for rs, size := range sizes {
			snap.Usage = append(snap.Usage, usage(rs, size, 0))
		}
		rep.Networks = append(rep.Networks, &NetworkReport{NetworkObservation: NetworkObservation{Network: network, Snapshot: snap}})
	}
	return rep
}

func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// A scrape shows the range sets the last sweep read: a range set the config
// dropped goes with it.
func TestMetricsEmitTheLastReport(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Observe(swept(map[string][]int{"a": {10, 10}, "b": {4}}), time.Now())
	m.Observe(swept(map[string][]int{"a": {10}, "b": {4}}), time.Now())
	if n := series(t, reg, "hostlease_pool_size_addresses"); n != 2 {
		t.Fatalf("pool size series = %d, want 2 (a/0, b/0)", n)
	}
	if v := gathered(t, reg, "hostlease_pool_free_addresses", "network", "a", "range_set", "0"); v != 10 {
		t.Fatalf("a/0 free = %v", v)
	}
}

// A network whose store cannot be read this sweep keeps the gauges of the
// last sweep that read it, and counts the error.
func TestMetricsKeepGaugesOfAnUnreadableStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Observe(swept(map[string][]int{"a": {10}}), time.Now())
	eio := &store.IOError{Op: "read", Path: "a.db", Err: syscall.EIO}
	m.Observe(&SweepReport{Result: SweepStoreError, Networks: []*NetworkReport{{NetworkObservation: NetworkObservation{Network: "a", ReadErr: eio,
		firstReadErr: eio}}}}, time.Now())
	if v := gathered(t, reg, "hostlease_pool_size_addresses", "network", "a", "range_set", "0"); v != 10 {
		t.Fatalf("pool size of an unreadable store = %v, want the last read 10", v)
	}
	if v := gathered(t, reg, "hostlease_store_errors_total", "network", "a", "class", ClassEnvironment, "errno", "EIO"); v != 1 {
		t.Fatalf("store errors = %v", v)
	}
}

// A network the last report does not list (its store is gone) loses every
// series; it can come back.
func TestMetricsForgetANetworkNoLongerReported(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	populate(m)
	m.Observe(swept(map[string][]int{"podnet": {254}, "other": {8}}), time.Now())
	m.Observe(swept(map[string][]int{"other": {8}}), time.Now())
	text := scrape(t, reg)
	if strings.Contains(text, `network="podnet"`) {
		t.Fatalf("series of a removed network remain:\n%s", text)
	}
	if !strings.Contains(text, `hostlease_pool_size_addresses{network="other",range_set="0"} 8`) {
		t.Fatalf("other network's series were deleted too:\n%s", text)
	}
	m.Observe(swept(map[string][]int{"podnet": {1}, "other": {8}}), time.Now())
	if n := series(t, reg, "hostlease_pool_size_addresses"); n != 2 {
		t.Fatalf("pool size series = %d, want 2", n)
	}
	if v := gathered(t, reg, "hostlease_reclaims_total", "network", "podnet", "reason", reclaim.ReleaseSandboxAbsent); v != 0 {
		t.Fatalf("a network back counts from 0: reclaims %v", v)
	}
}

func TestNewMetricsNilRegistererAndDoubleRegister(t *testing.T) {
	_ = NewMetrics(nil)
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	defer func() {
		if recover() == nil {
			t.Fatal("registering twice on one registry did not panic")
		}
	}()
	NewMetrics(reg)
}
