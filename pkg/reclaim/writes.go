package reclaim

import "github.com/hostlease/hostlease/pkg/allocator"

// MaxInfoWrites is how many records a sweep rewrites at most only to bring
// what a person reads up to date (see Writes).
const MaxInfoWrites = 1000

// Writes chooses which decisions a sweep stores, by index in order: every
// decision that changes what later sweeps decide on (a reclaim, a commit, the
// miss count, the start of an absence), and of those that change only what a
// person reads (Observation.Verdict and SandboxState, shown by `hostlease-gc
// list`) the first maxInfo. The others are decided again by the next sweep
// and stored then. So when every record's observation changes at once (a
// daemon's first sweep over a big store, a CRI outage and its end) a sweep's
// write transaction, the exclusive lock plugins wait behind, stays bounded,
// and the informational fields catch up within a few sweeps; the policy never
// waits for them.
func Writes(ds []Decision, maxInfo int) []int {
	var out []int
	for i, d := range ds {
		if d.Action == Keep && d.Obs == d.Record.Obs {
			continue // nothing changes
		}
		if d.Action == Keep && infoOnly(d.Obs, d.Record.Obs) {
			if maxInfo <= 0 {
				continue
			}
			maxInfo--
		}
		out = append(out, i)
	}
	return out
}

// infoOnly reports whether two observations differ only in the fields no
// decision reads (a field added to Observation counts as read).
func infoOnly(a, b allocator.Observation) bool {
	a.Verdict, a.SandboxState = b.Verdict, b.SandboxState
	return a == b
}

// Plan is what a sweep writes to one network's store, in one transaction and
// in this order: the index repair, the re-reservations, the releases of
// vanished host-local files, then the decisions.
type Plan struct {
	// RepairIndexes: rebuild the derived indexes from the records first.
	RepairIndexes bool
	// ReReserve are the re-reservations (never the conflicts).
	ReReserve []ReReserve
	// ReleaseHostLocal: release the records imported from host-local whose
	// reservation file is gone.
	ReleaseHostLocal bool
	// Writes are the decisions that change a record, by index into the
	// verdict's Decisions, in order (see Writes).
	Writes []int
}

// Empty reports whether the plan writes nothing.
func (p *Plan) Empty() bool {
	return !p.RepairIndexes && len(p.ReReserve) == 0 && !p.ReleaseHostLocal && len(p.Writes) == 0
}

// StoreFacts are what a sweep saw of a store, beyond its records, that
// leads to writes.
type StoreFacts struct {
	// IndexesChanged: a verification found the derived indexes disagreeing
	// with the records.
	IndexesChanged bool
	// HostLocalGone: a record imported from host-local lost its
	// reservation file.
	HostLocalGone bool
}

// PlanStore plans one network's writes from its settled verdict, its
// reconciliation (Reconcile) and the store's facts. A dry run's plan is
// empty: the verdicts and re-reservations are the same, nothing is written.
func PlanStore(v *Verdict, rereserve []ReReserve, f StoreFacts, maxInfo int, dryRun bool) Plan {
	if dryRun {
		return Plan{}
	}
	p := Plan{RepairIndexes: f.IndexesChanged, ReleaseHostLocal: f.HostLocalGone, Writes: Writes(v.Decisions, maxInfo)}
	for _, rr := range rereserve {
		if !rr.Conflict {
			p.ReReserve = append(p.ReReserve, rr)
		}
	}
	return p
}

// ShouldRebuild reports whether a sweep sets an unreadable store aside and
// rebuilds it from CRI: only with a complete CRI answer (a partial one would
// drop live addresses) and not in a dry run.
func ShouldRebuild(unreadable bool, cri CRIView, dryRun bool) bool {
	return unreadable && cri.Complete && !dryRun
}
