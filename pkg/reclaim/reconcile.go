package reclaim

import (
	"net/netip"
	"slices"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Use is an address a READY sandbox uses, as PodSandboxStatus reports it.
type Use struct {
	Sandbox PodSandbox
	IP      netip.Addr
}

// ReReserve is the reconciliation's verdict on one address a READY sandbox
// uses that the store does not hold for that sandbox.
type ReReserve struct {
	IP      netip.Addr
	Sandbox PodSandbox
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
		if _, _, ok := RangeOf(sets, u.IP); !ok || seen[u.IP] {
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

// RangeOf finds the range set (and range) holding ip; -1 when none does.
func RangeOf(sets []allocator.StoredRangeSet, ip netip.Addr) (int, allocator.StoredRange, bool) {
	for i, set := range sets {
		for _, r := range set.Ranges {
			if r.Contains(ip) {
				return i, r, true
			}
		}
	}
	return -1, allocator.StoredRange{}, false
}

// Reasons of a re-reservation: label values of
// hostlease_addresses_rereserved_total (docs/contracts.md).
const (
	ReReserveUnrecorded = "unrecorded"
	ReReserveOtherOwner = "other_owner"
	ReReserveDamaged    = "damaged"
)
