package daemon

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// What the collector keeps of each network between scrapes, and how a sweep's
// report becomes it.

// netSeries is what the collector emits for one network.
type netSeries struct {
	gauges   *netGauges // from the last report that could read the store; nil before
	counters netCounters
}

// netGauges is a network's state as one sweep left it.
type netGauges struct {
	pools              []poolGauge
	pending, committed int
	candidates         int
	damaged            int
	netnsUnverified    int
	exhaustions        []exhaustionCount
}

type poolGauge struct {
	rangeSet   string
	size, free float64
}

type exhaustionCount struct {
	rangeSet string
	count    uint64
	last     time.Time
}

// netCounters counts what the daemon did to one network.
type netCounters struct {
	reclaims     map[reclaim.Reason]float64
	vetoes       map[string]float64
	rereserved   map[string]float64
	storeErrors  map[storeError]float64
	guardTripped float64
	rebuilt      float64
	conflicts    float64
	indexRepairs float64
	// pluginReleases counts the plugin's releases of dead sandboxes, by
	// audit reason (allocator.PluginReasons).
	pluginReleases map[string]float64
}

// storeError is one store error a sweep met, by class and errno name.
type storeError struct{ class, errno string }

func newNetCounters() netCounters {
	c := netCounters{reclaims: map[reclaim.Reason]float64{}, vetoes: map[string]float64{VetoPodListsIP: 0, VetoMassReclaimGuard: 0},
		rereserved: map[string]float64{reclaim.ReReserveUnrecorded: 0, reclaim.ReReserveOtherOwner: 0, reclaim.ReReserveDamaged: 0}, storeErrors: map[storeError]float64{}}
	// Every label value exists from the start, so increase() in alerts sees
	// the first event and "absent" is not confused with "never happened".
	for _, r := range reclaim.ReleaseReasons {
		c.reclaims[r] = 0
	}
	c.pluginReleases = map[string]float64{}
	for _, r := range allocator.PluginReasons {
		c.pluginReleases[r] = 0
	}
	for _, class := range []string{ClassEnvironment, ClassUnreadable, ClassDamagedPage, ClassOther} {
		c.storeErrors[storeError{class: class}] = 0
	}
	return c
}

// add counts what one sweep did to a network.
func (c *netCounters) add(nr *NetworkReport) {
	for _, r := range nr.Reclaimed {
		c.reclaims[r.Reason]++
	}
	c.reclaims[reclaim.ReleaseHostLocalGone] += float64(len(nr.HostLocalReleased))
	for i := range nr.Verdict.Decisions {
		if nr.Verdict.Decisions[i].Reason == reclaim.KeepVetoed {
			c.vetoes[VetoPodListsIP]++
		}
	}
	if nr.Verdict.Guarded {
		c.guardTripped++
		c.vetoes[VetoMassReclaimGuard] += float64(nr.Verdict.WouldReclaim)
	}
	for _, rr := range nr.ReReserved {
		c.rereserved[rr.Reason]++
	}
	for _, rr := range nr.ReReserve {
		if rr.Conflict {
			c.conflicts++
		}
	}
	for _, e := range nr.storeErrors() {
		c.storeErrors[e]++
	}
	if nr.Rebuilt != "" {
		c.rebuilt++
	}
	if nr.IndexRepair.Changed() {
		c.indexRepairs++
	}
	if nr.Snapshot != nil {
		for _, ev := range nr.Snapshot.PluginReleases {
			c.pluginReleases[ev.Reason]++
		}
	}
}

// merge adds d's counts to c.
func (c *netCounters) merge(d *netCounters) {
	for k, n := range d.reclaims {
		c.reclaims[k] += n
	}
	for k, n := range d.vetoes {
		c.vetoes[k] += n
	}
	for k, n := range d.rereserved {
		c.rereserved[k] += n
	}
	for k, n := range d.storeErrors {
		c.storeErrors[k] += n
	}
	c.guardTripped += d.guardTripped
	c.rebuilt += d.rebuilt
	c.conflicts += d.conflicts
	c.indexRepairs += d.indexRepairs
	for k, n := range d.pluginReleases {
		c.pluginReleases[k] += n
	}
}

// gaugesOf is a network's state after the sweep that produced nr: the
// snapshot with this sweep's reclaims, host-local releases, re-reservations
// and commits applied
// (under --dry-run, which writes nothing, the snapshot as read).
func gaugesOf(nr *NetworkReport, dryRun bool) *netGauges {
	snap := nr.Snapshot
	g := &netGauges{damaged: len(snap.Damaged)}
	// Freed by this sweep: its reclaims and the host-local releases.
	freed := make(map[netip.Addr]bool, len(nr.Reclaimed)+len(nr.HostLocalReleased))
	for _, r := range nr.Reclaimed {
		freed[r.IP] = true
	}
	for _, r := range nr.HostLocalReleased {
		freed[r.IP] = true
	}
	for _, c := range nr.cands {
		if !freed[c.Record.IP] && reclaim.IsUnverified(c.Evidence, nr.netns.LiveMissing) {
			g.netnsUnverified++
		}
	}
	for i := range nr.Verdict.Decisions {
		d := &nr.Verdict.Decisions[i]
		switch {
		case freed[d.Record.IP]:
			continue
		case d.Record.State == allocator.StateCommitted || d.Action == reclaim.MarkCommitted && !dryRun:
			g.committed++
		default:
			g.pending++
		}
		if d.Candidate {
			g.candidates++
		}
	}
	used := make(map[int]int, len(snap.Usage))
	for _, rr := range nr.ReReserved {
		if rr.Reason != reclaim.ReReserveOtherOwner { // a new record (a replaced one was counted)
			g.committed++
		}
		if rs, _, ok := reclaim.RangeOf(snap.RangeSets, rr.IP); ok && rr.Reason == reclaim.ReReserveUnrecorded {
			used[rs]++
		}
	}
	for _, r := range nr.Reclaimed {
		used[r.RangeSet]--
	}
	for _, r := range nr.HostLocalReleased {
		used[r.RangeSet]--
	}
	for _, u := range snap.Usage {
		size, _ := u.Size.Float64()
		g.pools = append(g.pools, poolGauge{rangeSet: strconv.Itoa(u.RangeSet), size: float64(clampInt(size)),
			free: float64(clampInt(size - float64(u.Used+used[u.RangeSet])))})
	}
	for i := range snap.RangeSets {
		if _, ok := snap.Exhaustions[i]; !ok {
			g.exhaustions = append(g.exhaustions, exhaustionCount{rangeSet: strconv.Itoa(i)})
		}
	}
	for i, e := range snap.Exhaustions {
		g.exhaustions = append(g.exhaustions, exhaustionCount{rangeSet: strconv.Itoa(i), count: e.Count, last: e.Last})
	}
	return g
}
