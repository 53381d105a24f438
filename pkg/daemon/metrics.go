package daemon

import (
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the daemon's version, exported as hostlease_build_info{version}.
// Release builds set it with
//
//	-ldflags "-X github.com/hostlease/hostlease/pkg/daemon.Version=v1.2.3"
var Version = "dev"

// Label values that are part of the metrics contract (docs/contracts.md);
// the reclaim reasons are reclaim.ReleaseReasons, the re-reservation
// reasons reclaim.ReReserve*.
const (
	StatePending   = "pending"
	StateCommitted = "committed"

	VetoPodListsIP       = "pod_lists_ip"
	VetoMassReclaimGuard = "mass_reclaim_guard"

	FailureExhausted = "exhausted"

	SweepOK         = "ok"
	SweepCRIError   = "cri_error"
	SweepStoreError = "store_error"
)

// SweepDurationBuckets are the buckets of hostlease_sweep_duration_seconds.
// They span a sweep over an idle node (about a millisecond) up to a slow CRI
// answering near a 30s timeout, in 1-2.5-5 steps.
var SweepDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30}

// Metrics is the daemon's prometheus.Collector (node_exporter's style): a
// sweep hands it its report (Observe), and a scrape emits the state of every
// network as that last report saw it, and the counters of what the daemon
// itself did (reclaims, vetoes, re-reservations, rebuilds, sweeps...). The
// plugin's exhaustion counts are the store's own counters, emitted as read.
// Names, types and labels are a contract (docs/contracts.md): alerts and
// dashboards in deploy/ use them.
//
// Sandbox IDs, pod names and IPs are never labels: their cardinality is
// unbounded. Per-allocation detail is what `hostlease-gc list` is for.
type Metrics struct {
	duration prometheus.Histogram

	mu     sync.Mutex
	sweeps map[string]float64 // by result
	lastOK time.Time
	criUp  bool
	// netnsOK is the last sweep's reclaim.NetnsProofStatus.Verified.
	netnsOK bool
	// dataDirOK is the last sweep's DataDirStatus.OK.
	dataDirOK bool
	// nets holds each network the last report listed: an entry is created
	// when a report first lists the network and deleted when one no longer
	// does (its store is gone), so no series of a removed network remain.
	nets map[string]*netSeries
}

var (
	descBuildInfo = desc("build_info", "Always 1; labels carry the hostlease-gc version and the Go version it was built with.", "version", "goversion")
	descPoolSize  = desc("pool_size_addresses", "Number of allocatable addresses in a range set of a network.", labelNetwork, labelRangeSet)
	descPoolFree  = desc("pool_free_addresses", "Number of addresses of a range set of a network that are not allocated.", labelNetwork, labelRangeSet)
	descAllocs    = desc("allocations", "Allocations held in a network's store, by state (pending: IPAM ADD done, chain not known to have completed; committed).", labelNetwork, "state")
	descLeaks     = desc("leak_candidates", "Allocations whose sandbox was absent from the last complete CRI answer and that are still held (not reclaimed yet).", labelNetwork)
	descReclaims  = desc("reclaims_total", "Addresses reclaimed, by reason (sandbox_absent, netns_gone, predates_boot, host_local_gone, manual).", labelNetwork, "reason")
	descVetoes    = desc("vetoes_total", "Reclaims that were due but refused, by reason (pod_lists_ip, mass_reclaim_guard).", labelNetwork, "reason")
	descGuard     = desc("reclaim_guard_tripped_total", "Sweeps whose reclaims without proof of death for a network were refused because they exceeded --max-reclaim-fraction of the records the network holds.", labelNetwork)
	descFailures  = desc("allocation_failures_total", "Failed IPAM ADDs recorded by the plugin in the store, by range set and reason (exhausted).", labelNetwork, labelRangeSet, "reason")
	descLastExh   = desc("last_exhaustion_timestamp_seconds", "Unix time of the last ADD that failed because the range set had no free address.", labelNetwork, labelRangeSet)
	descSweeps    = desc("sweeps_total", "Sweeps run, by result (ok, cri_error, store_error).", "result")
	descLastOK    = desc("last_successful_sweep_timestamp_seconds", "Unix time at which the last sweep with result ok finished.")
	descCRIUp     = desc("cri_up", "1 if the last CRI ListPodSandbox call succeeded, else 0.")
	descRebuilt   = desc("stores_rebuilt_total", "Unreadable stores moved aside and rebuilt from CRI.", labelNetwork)
	descStoreErrs = desc("store_errors_total", "Sweeps that could not use a network's store, by class (environment: an errno of the system, never a rebuild; unreadable: set aside and rebuilt; damaged_page: reported, nothing reclaimed; other) and errno name for the environment class.", labelNetwork, "class", "errno")
	descDamaged   = desc("damaged_records", "Records of a network's store that do not decode: quarantined, their addresses stay reserved until an operator releases or rebuilds them.", labelNetwork)
	descReReserve = desc("addresses_rereserved_total", "Addresses a READY sandbox uses that the store did not hold for it, re-reserved for that sandbox, by reason (unrecorded, other_owner, damaged).", labelNetwork, "reason")
	descConflicts = desc("address_conflicts_total", "Addresses a READY sandbox uses that the store holds for another READY sandbox: reported, not rewritten.", labelNetwork)
	descNetnsOK   = desc("netns_dir_verified", "1 if the last sweep verified that --netns-dir is the directory the plugin records netns in (a record's netns directory identity, device, inode and file handle, is --netns-dir's), so a netns missing there proves its sandbox dead; 0 if not: no missing netns proves anything (see the daemon's log and hostlease-gc leaks for why).")
	descNetnsUnv  = desc("netns_unverified_records", "Records of a network that name a netns whose disappearance proves nothing from --netns-dir (no netns directory identity recorded, one by device and inode only, another directory's, or a netns outside --netns-dir): if they leak, they wait for the rules without proof.", labelNetwork)
	descPluginRel = desc("plugin_releases_total", "Addresses the plugin released at ADD from sandboxes whose netns the runtime had torn down (proven in the plugin's view), by audit reason (pod_sandbox_replaced: another sandbox of the same pod; netns_gone_at_exhaustion: a full range set), as read from the store's audit log.", labelNetwork, "reason")
	descDataDirOK = desc("data_dir_ok", "1 if the last sweep found --data-dir, and at least one store (<network>.db) in it; 0 if not: a missing data dir (a mistyped --data-dir, or not the ipam dataDir) sweeps nothing (the daemon's log and /readyz say why); an empty one is normal before the plugin's first ADD.")
	descIdxRepair = desc("index_repairs_total", "Sweeps that found a store's derived indexes (taken bitmap, owner index, pod UID index, records count) disagreeing with its records and rebuilt them from the records.", labelNetwork)
)

const (
	labelNetwork  = "network"
	labelRangeSet = "range_set"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("hostlease_"+name, help, labels, nil)
}

var allDescs = []*prometheus.Desc{descBuildInfo, descPoolSize, descPoolFree, descAllocs, descLeaks, descReclaims, descVetoes,
	descGuard, descFailures, descLastExh, descSweeps, descLastOK, descCRIUp, descRebuilt, descStoreErrs, descDamaged,
	descReReserve, descConflicts, descIdxRepair, descNetnsOK, descNetnsUnv, descPluginRel, descDataDirOK}

// NewMetrics creates the collector and registers it on reg (a nil reg
// registers nothing). It panics if the metrics are already registered on reg,
// as prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hostlease_sweep_duration_seconds", Help: "Wall time of one sweep, CRI listing included.", Buckets: SweepDurationBuckets,
		}),
		sweeps: map[string]float64{SweepOK: 0, SweepCRIError: 0, SweepStoreError: 0},
		nets:   map[string]*netSeries{},
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// Observe takes in one finished sweep: its result and duration, and what it
// saw and did on every network. Networks the report does not list are
// forgotten with all their series.
func (m *Metrics) Observe(rep *SweepReport, finished time.Time) {
	m.duration.Observe(rep.Duration.Seconds())
	// What each network's report says is worked out before the lock: a
	// scrape waits only for the merge.
	type observed struct {
		counts netCounters
		gauges *netGauges
	}
	seen := make(map[string]observed, len(rep.Networks))
	for _, nr := range rep.Networks {
		o := seen[nr.Network]
		if o.counts.reclaims == nil {
			o.counts = newNetCounters()
		}
		o.counts.add(nr)
		if nr.readable() {
			o.gauges = gaugesOf(nr, rep.DryRun)
		}
		seen[nr.Network] = o
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweeps[rep.Result]++
	if rep.Result == SweepOK {
		m.lastOK = finished
	}
	m.criUp = rep.CRIReached
	m.netnsOK = rep.Netns.Verified
	m.dataDirOK = rep.DataDir.OK
	for network, o := range seen {
		ns := m.nets[network]
		if ns == nil {
			ns = &netSeries{counters: newNetCounters()}
			m.nets[network] = ns
		}
		ns.counters.merge(&o.counts)
		if o.gauges != nil {
			ns.gauges = o.gauges
		}
	}
	for network := range m.nets {
		if _, ok := seen[network]; !ok {
			delete(m.nets, network)
		}
	}
}

// Describe sends every metric's description.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	m.duration.Describe(ch)
}

// Collect emits the last report's state and the counters.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descBuildInfo, 1, Version, runtime.Version())
	m.duration.Collect(ch)
	m.mu.Lock()
	defer m.mu.Unlock()
	for result, n := range m.sweeps {
		counter(descSweeps, n, result)
	}
	lastOK := 0.0 // no ok sweep yet
	if !m.lastOK.IsZero() {
		lastOK = float64(m.lastOK.UnixNano()) / 1e9
	}
	gauge(descLastOK, lastOK)
	gauge(descCRIUp, boolFloat(m.criUp))
	gauge(descNetnsOK, boolFloat(m.netnsOK))
	gauge(descDataDirOK, boolFloat(m.dataDirOK))
	for network, ns := range m.nets {
		c := &ns.counters
		for r, n := range c.reclaims {
			counter(descReclaims, n, network, string(r))
		}
		for r, n := range c.vetoes {
			counter(descVetoes, n, network, r)
		}
		for r, n := range c.rereserved {
			counter(descReReserve, n, network, r)
		}
		for e, n := range c.storeErrors {
			counter(descStoreErrs, n, network, e.class, e.errno)
		}
		counter(descGuard, c.guardTripped, network)
		counter(descRebuilt, c.rebuilt, network)
		counter(descConflicts, c.conflicts, network)
		counter(descIdxRepair, c.indexRepairs, network)
		for r, n := range c.pluginReleases {
			counter(descPluginRel, n, network, r)
		}
		g := ns.gauges
		if g == nil {
			continue
		}
		for _, p := range g.pools {
			gauge(descPoolSize, p.size, network, p.rangeSet)
			gauge(descPoolFree, p.free, network, p.rangeSet)
		}
		gauge(descAllocs, float64(g.pending), network, StatePending)
		gauge(descAllocs, float64(g.committed), network, StateCommitted)
		gauge(descLeaks, float64(g.candidates), network)
		gauge(descDamaged, float64(g.damaged), network)
		gauge(descNetnsUnv, float64(g.netnsUnverified), network)
		for _, e := range g.exhaustions {
			counter(descFailures, float64(e.count), network, e.rangeSet, FailureExhausted)
			if !e.last.IsZero() {
				gauge(descLastExh, float64(e.last.UnixNano())/1e9, network, e.rangeSet)
			}
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func clampInt(f float64) int {
	const maxInt = float64(1<<62 - 1)
	return int(min(max(f, 0), maxInt))
}
