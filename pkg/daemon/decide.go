package daemon

import (
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// This file is the sweep's decide stage: it hands what a sweep observed
// (and --dry-run, and the clock) to pkg/reclaim's pure functions. Each
// network's decision is a NetworkDecision made from its observation
// (planRebuild, then judge, then settle, each returning the decision so
// far with its part added). A dry run's plan holds the same verdicts,
// re-reservations and conflicts, and nothing to write or rebuild.

// preparedWrite is a planned write's new record value, encoded ahead of the
// write transaction when the snapshot could vouch for the record.
type preparedWrite struct {
	rewrite  store.Rewrite
	prepared bool
}

// planStores decides what happens to the stores as files, before their
// records are observed: each network's decision starts with planRebuild; a
// dry run does not remove plugins' stale temporary stores either.
func planStores(rep *SweepReport) {
	rep.cleanTemp = !rep.DryRun
	for _, nr := range rep.Networks {
		nr.NetworkDecision = planRebuild(&nr.NetworkObservation, rep.CRI, rep.DryRun)
	}
}

// planRebuild is the decision on a store as read: an unreadable one is set
// aside and rebuilt (reclaim.ShouldRebuild).
func planRebuild(o *NetworkObservation, cri reclaim.CRIView, dryRun bool) NetworkDecision {
	return NetworkDecision{rebuild: reclaim.ShouldRebuild(ErrorClass(o.ReadErr) == ClassUnreadable, cri, dryRun)}
}

// judgeNetworks judges every readable store's records (judge).
func judgeNetworks(rep *SweepReport, uses []reclaim.Use, p reclaim.Policy, now time.Time) {
	for _, nr := range rep.Networks {
		if nr.readable() {
			nr.NetworkDecision = judge(nr.NetworkDecision, &nr.NetworkObservation, uses, p, rep.CRI, now)
		}
	}
}

// judge is d with the observed records judged (reclaim.Judge: every rule but
// the API veto and the guard) and the addresses READY sandboxes use
// reconciled with them (reclaim.Reconcile).
func judge(d NetworkDecision, o *NetworkObservation, uses []reclaim.Use, p reclaim.Policy, cri reclaim.CRIView, now time.Time) NetworkDecision {
	snap := o.Snapshot
	d.ReReserve = reclaim.Reconcile(uses, snap.Records, snap.Damaged, snap.RangeSets, cri)
	d.Verdict = reclaim.Judge(p, o.cands, cri, now)
	return d
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

// settleNetworks settles every readable store's verdict and plans its
// writes (settle).
func settleNetworks(rep *SweepReport, p reclaim.Policy, maxInfo int, now time.Time) {
	for _, nr := range rep.Networks {
		if nr.readable() {
			nr.NetworkDecision = settle(nr.NetworkDecision, &nr.NetworkObservation, p, rep.API, maxInfo, rep.DryRun, now)
		}
	}
}

// settle is the judged decision d finished with the API view (vetoes) and
// the guard (reclaim.Settle), with the store's writes planned
// (reclaim.PlanStore: none in a dry run) and encoded (prepareWrites). The
// verdict's decisions are settled in place, so the judged d passed in is
// replaced by the result, never used beside it.
func settle(d NetworkDecision, o *NetworkObservation, p reclaim.Policy, api reclaim.APIView, maxInfo int, dryRun bool, now time.Time) NetworkDecision {
	reclaim.Settle(&d.Verdict, p, o.Snapshot.Reserved(), api)
	facts := reclaim.StoreFacts{IndexesChanged: o.Snapshot.Indexes.Changed(), HostLocalGone: o.hostLocalGone}
	d.plan = reclaim.PlanStore(&d.Verdict, d.ReReserve, facts, maxInfo, dryRun)
	d.prepared = prepareWrites(o.Snapshot, d.Verdict, d.plan.Writes, now)
	return d
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
