package daemon

import (
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// This file is the sweep's decide stage: it hands what a sweep observed
// (and --dry-run, and the clock) to pkg/reclaim's pure functions and keeps
// their verdicts and plans in the report. A dry run's plan holds the same
// verdicts, re-reservations and conflicts, and nothing to write or rebuild.

// preparedWrite is a planned write's new record value, encoded ahead of the
// write transaction when the snapshot could vouch for the record.
type preparedWrite struct {
	rewrite  store.Rewrite
	prepared bool
}

// planStores decides what happens to the stores as files: an unreadable one
// is set aside and rebuilt (reclaim.ShouldRebuild); a dry run does not
// remove plugins' stale temporary stores either.
func planStores(rep *SweepReport) {
	rep.cleanTemp = !rep.DryRun
	for _, nr := range rep.Networks {
		nr.rebuild = reclaim.ShouldRebuild(ErrorClass(nr.Err) == ClassUnreadable, rep.CRI, rep.DryRun)
	}
}

// judgeNetworks judges every readable store's records (reclaim.Judge: every
// rule but the API veto and the guard) and reconciles the addresses READY
// sandboxes use with them (reclaim.Reconcile).
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

// settleNetworks finishes each verdict with the API view (vetoes) and the
// guard (reclaim.Settle), and plans each store's writes (reclaim.PlanStore:
// none in a dry run).
func settleNetworks(rep *SweepReport, p reclaim.Policy, maxInfo int, now time.Time) {
	for _, nr := range rep.Networks {
		if !nr.readable() {
			continue
		}
		reclaim.Settle(&nr.Verdict, p, nr.Snapshot.Reserved(), rep.API)
		facts := reclaim.StoreFacts{IndexesChanged: nr.Snapshot.Indexes.Changed(), HostLocalGone: nr.hostLocalGone}
		nr.plan = reclaim.PlanStore(&nr.Verdict, nr.ReReserve, facts, maxInfo, rep.DryRun)
		nr.prepared = prepareWrites(nr.Snapshot, nr.Verdict, nr.plan.Writes, now)
	}
}

// prepareWrites encodes the new value of each planned write's record that is
// kept or marked committed (on every CPU when there are many, as on a
// daemon's first sweep). A reclaim, or a record the snapshot cannot vouch
// for, is left to the write transaction's look at the record as it is then.
func prepareWrites(snap *Snapshot, v reclaim.Verdict, writes []int, now time.Time) []preparedWrite {
	out := make([]preparedWrite, len(writes))
	inParallel(len(out), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			i := writes[j]
			d := &v.Decisions[i]
			// reclaim.Judge keeps the snapshot's order; the pointer check guards that.
			if d.Action == reclaim.Release || i >= len(snap.seen) || snap.seen[i].Rec != d.Record {
				continue
			}
			next := *d.Record // records are shared with the decode cache: never modify them
			d.Apply(&next, now)
			var err error
			out[j].rewrite, err = store.PrepareRewrite(snap.seen[i], &next)
			out[j].prepared = err == nil
		}
	})
	return out
}
