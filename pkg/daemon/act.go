package daemon

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// This file is the sweep's act stage: it carries out each network's
// decision (a rebuild, then the writes) and returns what it did as the
// network's NetworkOutcome. A dry run's plan is empty, so it does nothing.

// rebuildStores sets aside and rebuilds each store the decision says to
// (rebuildStore), and reads the rebuilt store again (readAgain) so the sweep
// carries on with it.
func (s *Sweeper) rebuildStores(ctx context.Context, rep *SweepReport, sandboxes []reclaim.PodSandbox) {
	for _, nr := range rep.Networks {
		if !nr.rebuild {
			continue
		}
		var reread bool
		nr.NetworkOutcome, reread = s.rebuildStore(ctx, &nr.NetworkObservation, sandboxes)
		if reread {
			nr.NetworkObservation = nr.readAgain()
		}
	}
}

// rebuildStore sets aside and rebuilds o's store and says whether the store
// at its path is to be read again: it was rebuilt, or another process
// rebuilt it since it was read.
func (s *Sweeper) rebuildStore(ctx context.Context, o *NetworkObservation, sandboxes []reclaim.PodSandbox) (out NetworkOutcome, reread bool) {
	aside, n, err := RebuildStore(ctx, s.CRI, o.Path, o.Network, sandboxes, s.stores[o.Path].rangeSets, s.now(), RebuildUnreadable, allocator.ByDaemon)
	switch {
	case errors.Is(err, ErrNotRebuilt):
		return out, true // sweep what is there now
	case err != nil:
		out.rebuildErr = err
		return out, false
	}
	out.Rebuilt, out.rebuiltN = aside, n
	return out, true
}

// cleanTemp removes plugins' stale temporary stores when clean (the
// decision) says so, and returns what it removed.
func (s *Sweeper) cleanTemp(clean bool) (removed []string, err error) {
	if !clean {
		return nil, nil
	}
	// A plugin killed during a network's first use leaves its temporary
	// store behind; nothing else removes it.
	return store.CleanStaleTemp(s.Opts.DataDir, store.StaleTempAge, time.Now())
}

// act writes one network's plan (nothing when the store was not read whole)
// and returns out, what the sweep did to the network so far (its rebuild),
// with what the writes did.
func (s *Sweeper) act(o *NetworkObservation, d *NetworkDecision, out NetworkOutcome, now time.Time) NetworkOutcome {
	if !o.readable() {
		return out
	}
	done, err := s.apply(o, d, now)
	if err != nil {
		out.WriteErr = err
		return out
	}
	out.Reclaimed, out.Committed, out.ReReserved, out.HostLocalReleased, out.IndexRepair = done.reclaimed, done.committed, done.rereserved, done.hostLocal, done.repair
	return out
}

// apply writes one network's plan in a single transaction and returns what
// it did. Each record is changed only if it is still the same allocation
// (allocator.SameAllocation): a plugin may have released and re-allocated
// the address since the snapshot, and that new allocation must not be
// touched. A reclaim is a release with its audit entry
// (allocator.ReleaseRecord).
//
// New values are encoded before the store is opened (prepareWrites); under the
// exclusive lock a record still holding the bytes the snapshot saw is simply
// replaced (equal bytes prove it is the same allocation, unchanged), and only
// a record that changed since is decoded and checked again.
func (s *Sweeper) apply(o *NetworkObservation, d *NetworkDecision, now time.Time) (applied, error) {
	if d.plan.Empty() {
		// Nothing to store: no write transaction, so no exclusive lock and no
		// fdatasyncs (an empty bbolt commit still writes its meta page) that
		// plugin calls would wait behind.
		return applied{}, nil
	}
	st, err := store.Open(o.Path, store.OpenOptions{LockTimeout: storeLockTimeout, By: allocator.ByDaemon})
	if err != nil {
		return applied{}, err
	}
	defer st.Close()
	var done applied
	err = st.Update(func(tx *store.Tx) error {
		done = applied{stored: done.stored[:0]}
		return s.applyPlan(tx, o, d, now, &done)
	})
	if err != nil {
		return applied{}, err
	}
	// What was just written need not be decoded again next sweep.
	cache := &s.stores[o.Path].decoded
	for _, w := range done.stored {
		cache.Stored(w)
	}
	return done, nil
}

// applied is what one write transaction did.
type applied struct {
	reclaimed  []ReclaimedRecord
	stored     []store.Rewrite // prepared values written as they were
	rereserved []reclaim.ReReserve
	hostLocal  []*allocator.Record
	repair     allocator.IndexRepair
	committed  int
}

// applyPlan is apply's transaction: the index repair, the re-reservations,
// the releases of vanished host-local files, then the decisions, in order.
func (s *Sweeper) applyPlan(tx *store.Tx, o *NetworkObservation, d *NetworkDecision, now time.Time, done *applied) error {
	plan := &d.plan
	var err error
	if plan.RepairIndexes {
		// Records are the truth: the indexes are rebuilt from them first
		// (audited by the allocator), under this write lock.
		if done.repair, err = tx.RepairIndexes("hostlease-gc sweep", now); err != nil {
			return err
		}
	}
	// Before any reclaim: a reclaim must not free an address a READY
	// sandbox uses.
	if done.rereserved, err = applyReReserves(tx, o.Network, o.Snapshot.RangeSets, plan.ReReserve, now); err != nil {
		return err
	}
	if plan.ReleaseHostLocal {
		if done.hostLocal, err = allocator.ReleaseHostLocalGone(tx, s.hostLocalDir(o.Network), allocator.ByDaemon, now); err != nil {
			return err
		}
	}
	for j, i := range plan.Writes {
		if err := applyWrite(tx, &d.Verdict.Decisions[i], d.prepared[j], now, done); err != nil {
			return err
		}
	}
	return nil
}

// applyWrite stores one decision, if its record is still the same
// allocation.
func applyWrite(tx *store.Tx, d *reclaim.Decision, w preparedWrite, now time.Time, done *applied) error {
	if w.prepared {
		ok, err := tx.PutIfUnchanged(w.rewrite)
		if err != nil {
			return err
		}
		if ok {
			done.stored = append(done.stored, w.rewrite)
			if d.Action == reclaim.MarkCommitted {
				done.committed++
			}
			return nil
		}
	}
	cur, _ := tx.Lookup(d.Record.IP)
	if cur == nil || !allocator.SameAllocation(cur, d.Record) {
		return nil // released (and perhaps reserved again) since the snapshot
	}
	switch d.Action {
	case reclaim.Release:
		why := allocator.Why{Action: allocator.AuditReclaim, Reason: string(d.Reason) + ": " + d.Detail, By: allocator.ByDaemon}
		if err := allocator.ReleaseRecord(tx, cur, why, now); err != nil {
			return err
		}
		done.reclaimed = append(done.reclaimed, ReclaimedRecord{Record: cur, Reason: d.Reason, Detail: d.Detail})
		return nil
	case reclaim.MarkCommitted:
		done.committed++
	default:
		if cur.Obs == d.Obs {
			return nil
		}
	}
	d.Apply(cur, now)
	return tx.Put(cur)
}

// parallelMin is the least number of items worth splitting over goroutines.
const parallelMin = 1024

// inParallel calls fn over [0, n) split into contiguous parts, one goroutine
// per CPU when n is large, and returns when all are done.
func inParallel(n int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/(parallelMin/2))
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { fn(w*n/workers, (w+1)*n/workers) })
	}
	wg.Wait()
}
