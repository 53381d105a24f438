package gc

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

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

func populate(m *Metrics) {
	m.InitNetwork("podnet", "0", "1")
	m.SetPool("podnet", []PoolStats{{RangeSet: "0", Size: 254, Free: 250}, {RangeSet: "1", Size: 65534, Free: 65530}})
	m.SetAllocations("podnet", 1, 3)
	m.SetLeakCandidates("podnet", 2)
	m.Reclaims.WithLabelValues("podnet", ReclaimSandboxAbsent).Add(5)
	m.Vetoes.WithLabelValues("podnet", VetoPodListsIP).Inc()
	m.ReclaimGuardTripped.WithLabelValues("podnet").Inc()
	m.RecordExhaustion("podnet", "0", 2, time.Unix(1700000000, 0))
	m.ObserveSweep(SweepOK, 12*time.Millisecond, time.Unix(1700000100, 500000000))
	m.ObserveSweep(SweepCRIError, 3*time.Second, time.Unix(1700000130, 0))
	m.SetCRIUp(false)
	m.StoresRebuilt.WithLabelValues("podnet").Inc()
	m.StoreErrors.WithLabelValues("podnet", ClassEnvironment, "EROFS").Inc()
	m.DamagedRecords.WithLabelValues("podnet").Set(2)
	m.AddressesReReserved.WithLabelValues("podnet", ReReserveUnrecorded).Inc()
	m.AddressConflicts.WithLabelValues("podnet").Inc()
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

func TestSetPoolDropsOldRangeSets(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.SetPool("a", []PoolStats{{"0", 10, 5}, {"1", 10, 10}})
	m.SetPool("b", []PoolStats{{"0", 4, 4}})
	m.SetPool("a", []PoolStats{{"0", 10, 4}})
	if n := testutil.CollectAndCount(m.PoolSize); n != 2 {
		t.Fatalf("pool size series = %d, want 2 (a/0, b/0)", n)
	}
	if v := testutil.ToFloat64(m.PoolFree.WithLabelValues("a", "0")); v != 4 {
		t.Fatalf("a/0 free = %v", v)
	}
}

func TestDeleteNetwork(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	populate(m)
	m.InitNetwork("other", "0")
	m.SetPool("other", []PoolStats{{"0", 8, 8}})
	m.DeleteNetwork("podnet")
	text := scrape(t, reg)
	if strings.Contains(text, `network="podnet"`) {
		t.Fatalf("series of deleted network remain:\n%s", text)
	}
	if !strings.Contains(text, `hostlease_pool_size_addresses{network="other",range_set="0"} 8`) {
		t.Fatalf("other network's series were deleted too:\n%s", text)
	}
	// The network can come back.
	m.SetPool("podnet", []PoolStats{{"0", 1, 1}})
	if n := testutil.CollectAndCount(m.PoolSize); n != 2 {
		t.Fatalf("pool size series = %d, want 2", n)
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
