package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Use is an address a READY sandbox uses, as PodSandboxStatus reports it.
type Use struct {
	Sandbox CRISandbox
	IP      netip.Addr
}

// ReReserve is the reconciliation's verdict on one address a READY sandbox
// uses that the store does not hold for that sandbox.
type ReReserve struct {
	IP      netip.Addr
	Sandbox CRISandbox
	// Reason is unrecorded, other_owner or damaged; Conflict marks an address
	// another READY sandbox holds, which is reported and not rewritten.
	Reason   string
	Conflict bool
	// Prev is the other owner's record (other_owner and conflicts).
	Prev *allocator.Record
}

// ReReserveIfName is the interface name a re-reserved record gets: CRI does
// not say which interface of the sandbox has the address, and Kubernetes
// names the pod's interface eth0. A wrong guess only delays the release to
// the sweep that finds the sandbox gone.
const ReReserveIfName = "eth0"

// Reconcile is the other direction of a sweep, CRI → store, a pure function:
// every address a READY sandbox uses (uses) that lies in the network's range
// sets must be held by that sandbox. It returns, in address order, each one
// that is not:
//   - no record holds it: unrecorded, re-reserve it for the sandbox;
//   - a damaged record holds it: damaged, re-reserve it (the sandbox is the
//     only owner anyone can name);
//   - a record of another sandbox holds it: other_owner, re-reserve it,
//     unless CRI lists that sandbox READY too, which is a conflict two live
//     sandboxes claim: report it, write nothing.
//
// Nothing is judged without a complete CRI answer or the network's range
// sets (an address of another network must not be taken into this one).
func Reconcile(uses []Use, recs []*allocator.Record, damaged []allocator.DamagedRecord, sets []allocator.StoredRangeSet, view CRIView) []ReReserve {
	if !view.Complete || len(sets) == 0 || len(uses) == 0 {
		return nil
	}
	byIP := make(map[netip.Addr]*allocator.Record, len(recs))
	for _, r := range recs {
		byIP[r.IP] = r
	}
	bad := make(map[netip.Addr]bool, len(damaged))
	for _, d := range damaged {
		bad[d.IP] = true
	}
	var out []ReReserve
	seen := map[netip.Addr]bool{}
	for _, u := range uses {
		if _, _, ok := rangeOf(sets, u.IP); !ok || seen[u.IP] {
			continue
		}
		seen[u.IP] = true
		rr := ReReserve{IP: u.IP, Sandbox: u.Sandbox}
		r := byIP[u.IP]
		switch {
		case r != nil && r.ContainerID == u.Sandbox.ID:
			continue // held by its user
		case r != nil:
			rr.Reason, rr.Prev = ReReserveOtherOwner, r
			if sb, ok := view.Sandboxes[r.ContainerID]; ok && sb.State == SandboxReady {
				rr.Conflict = true
			}
		case bad[u.IP]:
			rr.Reason = ReReserveDamaged
		default:
			rr.Reason = ReReserveUnrecorded
		}
		out = append(out, rr)
	}
	slices.SortFunc(out, func(a, b ReReserve) int { return a.IP.Compare(b.IP) })
	return out
}

// sandboxUses asks CRI for the addresses of READY sandboxes that no record
// (of any network) names, the only ones whose addresses the store may not
// hold. A sandbox's addresses do not change while it lives, so each is asked
// once (s.statusIPs); the cache keeps only sandboxes still listed READY.
func (s *Sweeper) sandboxUses(ctx context.Context, view CRIView, sandboxes []CRISandbox, nets []*NetworkReport) []Use {
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
	var uses []Use
	for _, sb := range sandboxes {
		if sb.State != SandboxReady || named[sb.ID] {
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
			uses = append(uses, Use{Sandbox: sb, IP: ip})
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
func applyReReserves(tx *store.Tx, network string, sets []allocator.StoredRangeSet, rrs []ReReserve, now time.Time) ([]ReReserve, error) {
	var done []ReReserve
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
			IP: rr.IP, ContainerID: rr.Sandbox.ID, IfName: ReReserveIfName, Network: network,
			PodNamespace: rr.Sandbox.PodNamespace, PodName: rr.Sandbox.PodName, PodUID: rr.Sandbox.PodUID,
			State: allocator.StateCommitted, Source: "reconcile", Created: now, Committed: now,
		}
		rs, r, ok := rangeOf(sets, rr.IP)
		rec.RangeSet = rs
		if ok {
			rec.PrefixLen, rec.Gateway = r.Subnet.Bits(), r.Gateway
		}
		if _, _, err := tx.Replace(rec); err != nil {
			return nil, err
		}
		why := "in use by a READY sandbox but not recorded"
		switch {
		case rr.Reason == ReReserveDamaged:
			why = "in use by a READY sandbox; its record was damaged"
		case rr.Prev != nil:
			why = fmt.Sprintf("in use by a READY sandbox but recorded for sandbox %s (not READY)", rr.Prev.ContainerID)
		}
		if err := tx.Audit(allocator.AuditEvent{Time: now, Action: allocator.AuditReReserve, Reason: rr.Reason + ": " + why,
			IP: rr.IP, ContainerID: rr.Sandbox.ID, IfName: ReReserveIfName, Pod: rec.PodRef(), By: allocator.ByDaemon}); err != nil {
			return nil, err
		}
		done = append(done, rr)
	}
	return done, nil
}
