package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// sandboxUses asks CRI for the addresses of READY sandboxes that no record
// (of any network) names, the only ones whose addresses the store may not
// hold. A sandbox's addresses do not change while it lives, so each is asked
// once (s.statusIPs); the cache keeps only sandboxes still listed READY.
func (s *Sweeper) sandboxUses(ctx context.Context, view reclaim.CRIView, sandboxes []reclaim.PodSandbox, nets []*NetworkReport) []reclaim.Use {
	if !view.Complete {
		return nil
	}
	named := map[string]bool{}
	for _, nr := range nets {
		if nr.Snapshot == nil {
			continue
		}
		for _, r := range nr.Snapshot.Records {
			named[r.ContainerID] = true
		}
	}
	if s.statusIPs == nil {
		s.statusIPs = map[string][]netip.Addr{}
	}
	ready := make(map[string]bool, len(sandboxes))
	var uses []reclaim.Use
	for _, sb := range sandboxes {
		if sb.State != reclaim.SandboxReady || named[sb.ID] {
			continue
		}
		ready[sb.ID] = true
		ips, ok := s.statusIPs[sb.ID]
		if !ok {
			cctx, cancel := context.WithTimeout(ctx, criTimeout)
			var err error
			ips, err = s.CRI.SandboxIPs(cctx, sb.ID)
			cancel()
			if err != nil {
				s.Log.Debug("PodSandboxStatus failed; its addresses are checked next sweep", "sandbox", sb.ID, "error", err)
				continue
			}
			s.statusIPs[sb.ID] = ips
		}
		for _, ip := range ips {
			uses = append(uses, reclaim.Use{Sandbox: sb, IP: ip})
		}
	}
	for id := range s.statusIPs {
		if !ready[id] {
			delete(s.statusIPs, id)
		}
	}
	return uses
}

// applyReReserves writes the re-reservations in tx, before any reclaim of the
// same sweep (a reclaim must not free an address a READY sandbox uses). Under
// the store's lock each address is looked at again: held by its user since,
// or by an owner other than the one judged, it is left for the next sweep.
func applyReReserves(tx *store.Tx, network string, sets []allocator.StoredRangeSet, rrs []reclaim.ReReserve, now time.Time) ([]reclaim.ReReserve, error) {
	var done []reclaim.ReReserve
	for _, rr := range rrs {
		if rr.Conflict {
			continue
		}
		cur, _ := tx.Lookup(rr.IP)
		switch {
		case cur != nil && cur.ContainerID == rr.Sandbox.ID:
			continue
		case cur != nil && (rr.Prev == nil || !allocator.SameAllocation(cur, rr.Prev)):
			continue
		}
		rec := &allocator.Record{
			IP: rr.IP, ContainerID: rr.Sandbox.ID, IfName: reclaim.ReReserveIfName, Network: network,
			PodNamespace: rr.Sandbox.PodNamespace, PodName: rr.Sandbox.PodName, PodUID: rr.Sandbox.PodUID,
			State: allocator.StateCommitted, Source: "reconcile", Created: now, Committed: now,
		}
		rs, r, ok := reclaim.RangeOf(sets, rr.IP)
		rec.RangeSet = rs
		if ok {
			rec.PrefixLen, rec.Gateway = r.Subnet.Bits(), r.Gateway
		}
		if _, _, err := tx.Replace(rec); err != nil {
			return nil, err
		}
		why := "in use by a READY sandbox but not recorded"
		switch {
		case rr.Reason == reclaim.ReReserveDamaged:
			why = "in use by a READY sandbox; its record was damaged"
		case rr.Prev != nil:
			why = fmt.Sprintf("in use by a READY sandbox but recorded for sandbox %s (not READY)", rr.Prev.ContainerID)
		}
		if err := tx.Audit(allocator.AuditEvent{Time: now, Action: allocator.AuditReReserve, Reason: rr.Reason + ": " + why,
			IP: rr.IP, ContainerID: rr.Sandbox.ID, IfName: reclaim.ReReserveIfName, Pod: rec.PodRef(), By: allocator.ByDaemon}); err != nil {
			return nil, err
		}
		done = append(done, rr)
	}
	return done, nil
}
