package gc

import (
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the daemon's version, exported as hostlease_build_info{version}.
// Release builds set it with
//
//	-ldflags "-X github.com/hostlease/hostlease/pkg/gc.Version=v1.2.3"
var Version = "dev"

// Label values that are part of the metrics contract (docs/contracts.md).
const (
	StatePending   = "pending"
	StateCommitted = "committed"

	ReclaimSandboxAbsent = "sandbox_absent"
	ReclaimNetnsGone     = "netns_gone"
	ReclaimPredatesBoot  = "predates_boot"
	ReclaimManual        = "manual"

	VetoPodListsIP       = "pod_lists_ip"
	VetoMassReclaimGuard = "mass_reclaim_guard"

	FailureExhausted = "exhausted"

	SweepOK         = "ok"
	SweepCRIError   = "cri_error"
	SweepStoreError = "store_error"
)

const (
	metricsNamespace = "hostlease"
	labelNetwork     = "network"
	labelRangeSet    = "range_set"
)

// SweepDurationBuckets are the buckets of hostlease_sweep_duration_seconds.
// They span a sweep over an idle node (about a millisecond) up to a slow CRI
// answering near a 30s timeout, in 1-2.5-5 steps.
var SweepDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30}

// Metrics is the registry of every metric the daemon exports. The names,
// types and labels are a contract (docs/contracts.md): alerts and dashboards
// in deploy/ use them, and deploy/deploy_test.go checks they exist.
//
// Sandbox IDs, pod names and IPs are never labels: their cardinality is
// unbounded. Per-allocation detail is what `hostlease-gc list` is for.
type Metrics struct {
	BuildInfo           *prometheus.GaugeVec   // version, goversion
	PoolSize            *prometheus.GaugeVec   // network, range_set
	PoolFree            *prometheus.GaugeVec   // network, range_set
	Allocations         *prometheus.GaugeVec   // network, state
	LeakCandidates      *prometheus.GaugeVec   // network
	Reclaims            *prometheus.CounterVec // network, reason
	Vetoes              *prometheus.CounterVec // network, reason
	ReclaimGuardTripped *prometheus.CounterVec // network
	AllocationFailures  *prometheus.CounterVec // network, range_set, reason
	LastExhaustion      *prometheus.GaugeVec   // network, range_set
	Sweeps              *prometheus.CounterVec // result
	SweepDuration       prometheus.Histogram
	LastSuccessfulSweep prometheus.Gauge
	CRIUp               prometheus.Gauge
	StoresRebuilt       *prometheus.CounterVec // network

	mu        sync.Mutex
	rangeSets map[string]map[string]bool // network -> range sets with pool gauges
}

// NewMetrics creates every metric and registers it on reg (a nil reg registers
// nothing, which is convenient in tests of other code). It panics if a metric
// is already registered on reg, as prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rangeSets: map[string]map[string]bool{},
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "build_info",
			Help: "Always 1; labels carry the hostlease-gc version and the Go version it was built with.",
		}, []string{"version", "goversion"}),
		PoolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "pool_size_addresses",
			Help: "Number of allocatable addresses in a range set of a network.",
		}, []string{labelNetwork, labelRangeSet}),
		PoolFree: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "pool_free_addresses",
			Help: "Number of addresses of a range set of a network that are not allocated.",
		}, []string{labelNetwork, labelRangeSet}),
		Allocations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "allocations",
			Help: "Allocations held in a network's store, by state (pending: IPAM ADD done, chain not known to have completed; committed).",
		}, []string{labelNetwork, "state"}),
		LeakCandidates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "leak_candidates",
			Help: "Allocations whose sandbox is absent from CRI or not ready and that are not reclaimed (yet).",
		}, []string{labelNetwork}),
		Reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "reclaims_total",
			Help: "Addresses reclaimed, by reason (sandbox_absent, netns_gone, predates_boot, manual).",
		}, []string{labelNetwork, "reason"}),
		Vetoes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "vetoes_total",
			Help: "Reclaims that were due but refused, by reason (pod_lists_ip, mass_reclaim_guard).",
		}, []string{labelNetwork, "reason"}),
		ReclaimGuardTripped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "reclaim_guard_tripped_total",
			Help: "Sweeps whose reclaims without proof of death for a network were refused because they exceeded --max-reclaim-fraction of the records the network holds.",
		}, []string{labelNetwork}),
		AllocationFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "allocation_failures_total",
			Help: "Failed IPAM ADDs recorded by the plugin in the store, by range set and reason (exhausted).",
		}, []string{labelNetwork, labelRangeSet, "reason"}),
		LastExhaustion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "last_exhaustion_timestamp_seconds",
			Help: "Unix time of the last ADD that failed because the range set had no free address.",
		}, []string{labelNetwork, labelRangeSet}),
		Sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "sweeps_total",
			Help: "Sweeps run, by result (ok, cri_error, store_error).",
		}, []string{"result"}),
		SweepDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "sweep_duration_seconds",
			Help:    "Wall time of one sweep, CRI listing included.",
			Buckets: SweepDurationBuckets,
		}),
		LastSuccessfulSweep: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "last_successful_sweep_timestamp_seconds",
			Help: "Unix time at which the last sweep with result ok finished.",
		}),
		CRIUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "cri_up",
			Help: "1 if the last CRI ListPodSandbox call succeeded, else 0.",
		}),
		StoresRebuilt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "stores_rebuilt_total",
			Help: "Unreadable stores moved aside and rebuilt from CRI.",
		}, []string{labelNetwork}),
	}
	m.BuildInfo.WithLabelValues(Version, runtime.Version()).Set(1)
	// Pre-create the label-only series so rate()/increase() have a zero to
	// start from and "absent" is not confused with "never happened".
	for _, r := range []string{SweepOK, SweepCRIError, SweepStoreError} {
		m.Sweeps.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.BuildInfo, m.PoolSize, m.PoolFree, m.Allocations, m.LeakCandidates,
		m.Reclaims, m.Vetoes, m.ReclaimGuardTripped, m.AllocationFailures,
		m.LastExhaustion, m.Sweeps, m.SweepDuration, m.LastSuccessfulSweep,
		m.CRIUp, m.StoresRebuilt,
	}
}

// PoolStats is one range set's size and free count.
type PoolStats struct {
	RangeSet string // index in the config: "0", "1", ...
	Size     int
	Free     int
}

// InitNetwork creates the zero-valued counter series of a network (reclaims by
// every reason, vetoes, guard trips, rebuilds, and exhaustion failures of the
// given range sets) so that increase() in alerts sees the first event. Call it
// when a network's store is first seen; it is idempotent.
func (m *Metrics) InitNetwork(network string, rangeSets ...string) {
	for _, r := range []string{ReclaimSandboxAbsent, ReclaimNetnsGone, ReclaimPredatesBoot, ReclaimManual} {
		m.Reclaims.WithLabelValues(network, r)
	}
	for _, r := range []string{VetoPodListsIP, VetoMassReclaimGuard} {
		m.Vetoes.WithLabelValues(network, r)
	}
	m.ReclaimGuardTripped.WithLabelValues(network)
	m.StoresRebuilt.WithLabelValues(network)
	for _, rs := range rangeSets {
		m.AllocationFailures.WithLabelValues(network, rs, FailureExhausted)
	}
}

// SetPool sets the size and free gauges of a network's range sets. Range sets
// the network had before but not in pools (the config shrank) are deleted.
func (m *Metrics) SetPool(network string, pools []PoolStats) {
	keep := make(map[string]bool, len(pools))
	for _, p := range pools {
		keep[p.RangeSet] = true
		m.PoolSize.WithLabelValues(network, p.RangeSet).Set(float64(p.Size))
		m.PoolFree.WithLabelValues(network, p.RangeSet).Set(float64(p.Free))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for rs := range m.rangeSets[network] {
		if !keep[rs] {
			m.PoolSize.DeleteLabelValues(network, rs)
			m.PoolFree.DeleteLabelValues(network, rs)
		}
	}
	m.rangeSets[network] = keep
}

// SetAllocations sets the allocation gauges of a network; both states are
// always exported so a state that drops to zero reads 0, not "no data".
func (m *Metrics) SetAllocations(network string, pending, committed int) {
	m.Allocations.WithLabelValues(network, StatePending).Set(float64(pending))
	m.Allocations.WithLabelValues(network, StateCommitted).Set(float64(committed))
}

// SetLeakCandidates sets the number of leak candidates of a network.
func (m *Metrics) SetLeakCandidates(network string, n int) {
	m.LeakCandidates.WithLabelValues(network).Set(float64(n))
}

// ObserveSweep records one finished sweep: its result, its duration and, for
// an ok sweep, the time it finished.
func (m *Metrics) ObserveSweep(result string, d time.Duration, finished time.Time) {
	m.Sweeps.WithLabelValues(result).Inc()
	m.SweepDuration.Observe(d.Seconds())
	if result == SweepOK {
		m.LastSuccessfulSweep.Set(float64(finished.UnixNano()) / 1e9)
	}
}

// SetCRIUp records whether the last CRI call succeeded.
func (m *Metrics) SetCRIUp(up bool) {
	if up {
		m.CRIUp.Set(1)
	} else {
		m.CRIUp.Set(0)
	}
}

// RecordExhaustion records count ADD failures for exhaustion of a range set
// (as read from the store) and the time of the last one.
func (m *Metrics) RecordExhaustion(network, rangeSet string, count int, last time.Time) {
	if count > 0 {
		m.AllocationFailures.WithLabelValues(network, rangeSet, FailureExhausted).Add(float64(count))
	}
	if !last.IsZero() {
		m.LastExhaustion.WithLabelValues(network, rangeSet).Set(float64(last.UnixNano()) / 1e9)
	}
}

// DeleteNetwork removes every series of a network, for when its store
// disappears (the network was removed from the node), so stale pool gauges do
// not keep alerts firing.
func (m *Metrics) DeleteNetwork(network string) {
	m.mu.Lock()
	delete(m.rangeSets, network)
	m.mu.Unlock()
	match := prometheus.Labels{labelNetwork: network}
	m.PoolSize.DeletePartialMatch(match)
	m.PoolFree.DeletePartialMatch(match)
	m.Allocations.DeletePartialMatch(match)
	m.LeakCandidates.DeletePartialMatch(match)
	m.Reclaims.DeletePartialMatch(match)
	m.Vetoes.DeletePartialMatch(match)
	m.ReclaimGuardTripped.DeletePartialMatch(match)
	m.AllocationFailures.DeletePartialMatch(match)
	m.LastExhaustion.DeletePartialMatch(match)
	m.StoresRebuilt.DeletePartialMatch(match)
}
