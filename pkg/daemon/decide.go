package daemon

import (
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// This file is the sweep's decide stage: pure functions from what a sweep
// observed (and --dry-run, and the clock) to its plan. A dry run's plan
// holds the same verdicts, re-reservations and conflicts, and nothing to
// write or rebuild.

// storePlan is what act writes to one store, in one transaction.
type storePlan struct {
	// repairIndexes: rebuild the derived indexes from the records first.
	repairIndexes bool
	// reReserve are the re-reservations (never the conflicts).
	reReserve []reclaim.ReReserve
	// releaseHostLocal: release the records imported from host-local whose
	// reservation file is gone.
	releaseHostLocal bool
	// writes are the decisions that change a record (see Writes).
	writes []plannedWrite
}

func (p *storePlan) empty() bool {
	return !p.repairIndexes && len(p.reReserve) == 0 && !p.releaseHostLocal && len(p.writes) == 0
}

// plannedWrite is one decision that changes the store, with the record's new
// value when it could be encoded ahead of the write transaction.
type plannedWrite struct {
	d        *reclaim.Decision
	rewrite  store.Rewrite
	prepared bool
}

// planStores decides what happens to the stores as files: an unreadable one
// is set aside and rebuilt from CRI only with a complete CRI answer (a
// partial one would drop live addresses) and not in a dry run; a dry run
// does not remove plugins' stale temporary stores either.
func planStores(rep *SweepReport) {
	rep.cleanTemp = !rep.DryRun
	for _, nr := range rep.Networks {
		nr.rebuild = ErrorClass(nr.Err) == ClassUnreadable && rep.CRI.Complete && !rep.DryRun
	}
}

// judgeNetworks judges every readable store's records (Judge: every rule but the
// API veto and the guard) and reconciles the addresses READY sandboxes use
// with them (Reconcile).
func judgeNetworks(rep *SweepReport, uses []reclaim.Use, p reclaim.Policy, now time.Time) {
	for _, nr := range rep.Networks {
		if !nr.readable() {
			continue
		}
		snap := nr.Snapshot
		nr.ReReserve = reclaim.Reconcile(uses, snap.Records, snap.Damaged, snap.RangeSets, rep.CRI)
		nr.Verdict = reclaim.Judge(p, nr.cands, rep.CRI, now)
	}
}

// needsAPI reports whether any verdict holds a reclaim the API server could
// veto.
func needsAPI(rep *SweepReport) bool {
	for _, nr := range rep.Networks {
		if nr.readable() && nr.Verdict.NeedsAPI() {
			return true
		}
	}
	return false
}

// settleNetworks finishes each verdict with the API view (vetoes) and the guard
// (Settle), and plans each store's writes: none in a dry run.
func settleNetworks(rep *SweepReport, p reclaim.Policy, maxInfo int, now time.Time) {
	for _, nr := range rep.Networks {
		if !nr.readable() {
			continue
		}
		reclaim.Settle(&nr.Verdict, p, nr.Snapshot.Held(), rep.API)
		if rep.DryRun {
			continue
		}
		nr.plan = storePlan{
			repairIndexes:    nr.Snapshot.Indexes.Changed(),
			releaseHostLocal: nr.hostLocalGone,
			writes:           planWrites(nr.Snapshot, nr.Verdict, maxInfo, now),
		}
		for _, rr := range nr.ReReserve {
			if !rr.Conflict {
				nr.plan.reReserve = append(nr.plan.reReserve, rr)
			}
		}
	}
}

// planWrites lists the decisions to store (see Writes), in order, and encodes
// the new value of each record that is kept or marked committed (on every CPU
// when there are many, as on a daemon's first sweep). A reclaim, or a record
// the snapshot cannot vouch for, is left to the write transaction's look at
// the record as it is then.
func planWrites(snap *Snapshot, v reclaim.NetworkVerdict, maxInfo int, now time.Time) []plannedWrite {
	idx := reclaim.Writes(v.Decisions, maxInfo)
	plan := make([]plannedWrite, len(idx))
	inParallel(len(plan), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			i := idx[j]
			w := &plan[j]
			w.d = &v.Decisions[i]
			d := w.d
			// Judge keeps the snapshot's order; the pointer check guards that.
			if d.Action == reclaim.Reclaim || i >= len(snap.seen) || snap.seen[i].Rec != d.Record {
				continue
			}
			next := *d.Record // records are shared with the decode cache: never modify them
			next.Obs = d.Obs
			if d.Action == reclaim.MarkCommitted {
				next.State, next.Committed = allocator.StateCommitted, now
			}
			var err error
			w.rewrite, err = store.PrepareRewrite(snap.seen[i], &next)
			w.prepared = err == nil
		}
	})
	return plan
}
