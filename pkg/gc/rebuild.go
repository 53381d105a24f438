package gc

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// RebuildStore replaces the unreadable store at path with one rebuilt from the
// runtime: every READY sandbox's addresses (limited to sets when known) become
// committed records. The unreadable file is kept as <path>.corrupt-<unix>.
//
// The swap is atomic: the new store is written and fsynced beside the old one,
// the old one is hard-linked aside, and the new one is renamed over it. A plugin
// therefore sees either the unreadable store (and refuses ADD) or the rebuilt
// one, never a missing store it would create empty and allocate from.
func RebuildStore(ctx context.Context, cri CRI, path, network string, sandboxes []CRISandbox, sets []allocator.StoredRangeSet, now time.Time) (aside string, n int, err error) {
	var recs []*allocator.Record
	for _, sb := range sandboxes {
		if sb.State != SandboxReady {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, criTimeout)
		ips, err := cri.SandboxIPs(cctx, sb.ID)
		cancel()
		if err != nil {
			return "", 0, fmt.Errorf("PodSandboxStatus %s: %w (rebuild needs every READY sandbox's addresses)", sb.ID, err)
		}
		for _, ip := range ips {
			rs, r, ok := rangeOf(sets, ip)
			if len(sets) > 0 && !ok {
				continue // another network's address
			}
			rec := &allocator.Record{
				IP: ip, RangeSet: rs, ContainerID: sb.ID, Network: network,
				PodNamespace: sb.PodNamespace, PodName: sb.PodName, PodUID: sb.PodUID,
				State: allocator.StateCommitted, Source: "rebuild", Created: now, Committed: now,
			}
			if ok {
				rec.PrefixLen, rec.Gateway = r.Subnet.Bits(), r.Gateway
			}
			recs = append(recs, rec)
		}
	}
	tmp := path + ".rebuild"
	_ = os.Remove(tmp)
	st, err := allocator.Open(tmp, allocator.OpenOptions{Create: true, LockTimeout: storeLockTimeout})
	if err != nil {
		return "", 0, err
	}
	err = st.Update(func(tx *allocator.Tx) error {
		if err := tx.SetNetwork(network); err != nil {
			return err
		}
		if len(sets) > 0 {
			if err := tx.SetRangeSets(sets); err != nil {
				return err
			}
		}
		// The runtime is the truth now; stale host-local files must not be
		// imported over it.
		if err := tx.MarkMigrated(now); err != nil {
			return err
		}
		for _, r := range recs {
			if prev, _ := tx.Get(r.IP); prev != nil {
				continue
			}
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return tx.Audit(allocator.AuditEvent{Time: now, Action: "rebuild", By: "hostlease-gc",
			Reason: fmt.Sprintf("store was unreadable; rebuilt %d records from CRI", len(recs))})
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", 0, err
	}
	aside = fmt.Sprintf("%s.corrupt-%d", path, now.Unix())
	if err := os.Link(path, aside); err != nil {
		os.Remove(tmp)
		return "", 0, fmt.Errorf("keeping the unreadable store as %s: %w", aside, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", 0, err
	}
	return aside, len(recs), nil
}

// rangeOf finds the range set (and range) holding ip; -1 when none does.
func rangeOf(sets []allocator.StoredRangeSet, ip netip.Addr) (int, allocator.StoredRange, bool) {
	for i, set := range sets {
		for _, r := range set.Ranges {
			if r.Contains(ip) {
				return i, r, true
			}
		}
	}
	return -1, allocator.StoredRange{}, false
}

// rebuild handles an unreadable store found by a sweep: only with a complete
// CRI answer (a partial one would drop live addresses), and not in dry-run.
func (s *Sweeper) rebuild(ctx context.Context, nr *NetworkReport, view CRIView, sandboxes []CRISandbox) {
	log := s.Log.With("network", nr.Network, "path", nr.Path)
	if s.Opts.DryRun {
		log.Warn("store unreadable; would set it aside and rebuild it from CRI (dry run)", "error", nr.Err)
		return
	}
	if !view.Complete {
		log.Warn("store unreadable; not rebuilding without a complete CRI answer", "error", nr.Err)
		return
	}
	aside, n, err := RebuildStore(ctx, s.CRI, nr.Path, nr.Network, sandboxes, s.rangeCache[nr.Path], s.now())
	if err != nil {
		log.Error("store unreadable and rebuild failed", "error", err, "cause", nr.Err)
		return
	}
	log.Warn("store was unreadable: set aside and rebuilt from CRI", "setAside", aside, "records", n, "cause", nr.Err)
	nr.Rebuilt = aside
	if s.Metrics != nil {
		s.Metrics.StoresRebuilt.WithLabelValues(nr.Network).Inc()
	}
	nr.Snapshot, nr.Err = ReadSnapshot(nr.Path)
}
