package reclaim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// SandboxAddrs is what the runtime reports of one sandbox for a rebuild: the
// sandbox as listed and the addresses PodSandboxStatus gives it.
type SandboxAddrs struct {
	Sandbox PodSandbox
	IPs     []netip.Addr
}

// Salvage is what could still be read of a store before a rebuild.
type Salvage struct {
	Records []*allocator.Record
	Damaged []allocator.DamagedRecord
	Sets    []allocator.StoredRangeSet
	// Unreadable are the addresses whose lookup met a damaged page and that
	// the taken bitmap does not show free: the page may hold their records.
	Unreadable []netip.Addr
}

// RebuildInput is everything a rebuilt store's content is decided from.
type RebuildInput struct {
	Network string
	// Sets are the network's range sets as the caller knows them (the last
	// ones read). Empty: the runtime's addresses are not limited to the
	// network's, and the salvaged range sets are used for the rest.
	Sets []allocator.StoredRangeSet
	// Sandboxes are the READY and NOTREADY sandboxes with their addresses,
	// in the runtime's order; Listed holds every sandbox ID the runtime lists.
	Sandboxes []SandboxAddrs
	Listed    map[string]bool
	Old       Salvage
	Now       time.Time
}

// Rebuilt is the content of a rebuilt store.
type Rebuilt struct {
	// Records to put, in order, at most one per address.
	Records []*allocator.Record
	// Sets are the range sets the new store records (none: it records none).
	Sets []allocator.StoredRangeSet
	// FromCRI, Kept and DamagedKept count the records by where they come
	// from; Unattributed are the addresses kept reserved for nobody.
	FromCRI, Kept, DamagedKept int
	Unattributed               []string

	claimed map[netip.Addr]bool
}

// Why is the rebuild's audit reason.
func (r *Rebuilt) Why() string {
	why := fmt.Sprintf("rebuilt %d records: %d from CRI, %d kept from the old store, %d damaged ones kept reserved",
		len(r.Records), r.FromCRI, r.Kept, r.DamagedKept)
	if len(r.Unattributed) > 0 {
		why += fmt.Sprintf("; owner unknown (kept reserved, reclaimed by the usual rules unless a sandbox uses them): %v", r.Unattributed)
	}
	return why
}

// MergeRebuild decides what a rebuilt store holds, a pure function. The first
// claim of an address wins, in this order:
//   - every address a READY sandbox uses (limited to in.Sets when known), as
//     a committed record of that sandbox: the runtime is the truth for those;
//     likewise every address a NOTREADY sandbox still reports (its pod is
//     stopped, not gone, and the runtime's DEL releases it later);
//   - every record of the old store that still decodes, as it was, also
//     those of sandboxes the runtime does not list: such a record is either
//     a leak or an ADD still in flight, and only the daemon's reclaim rules
//     may tell them apart (forgetting it could hand an in-flight sandbox's
//     address out twice);
//   - every damaged record's address, kept reserved (pending) for the listed
//     sandbox its readable part names, or for nobody ("": unattributed; the
//     daemon re-reserves it for a READY sandbox that uses it, and reclaims it
//     by the rules without proof otherwise, never at once);
//   - every address behind a damaged page (Salvage.Unreadable), reserved for
//     nobody in the same way.
func MergeRebuild(in RebuildInput) *Rebuilt {
	out := &Rebuilt{claimed: map[netip.Addr]bool{}}
	for _, sa := range in.Sandboxes {
		out.fromRuntime(in, sa)
	}
	out.Sets = in.Sets
	if len(out.Sets) == 0 {
		out.Sets = in.Old.Sets
	}
	for _, r := range in.Old.Records {
		if out.claim(r.IP) {
			cp := *r
			out.Records = append(out.Records, &cp)
			out.Kept++
		}
	}
	for _, d := range in.Old.Damaged {
		if !d.IP.IsValid() || !out.claim(d.IP) {
			continue
		}
		rs, r, ok := RangeOf(out.Sets, d.IP)
		owner, ifname := d.ContainerID, d.IfName
		if !in.Listed[owner] {
			owner, ifname = "", "" // a hint naming no sandbox the runtime knows
		}
		rec := &allocator.Record{IP: d.IP, RangeSet: rs, ContainerID: owner, IfName: ifname, Network: in.Network,
			State: allocator.StatePending, Source: "rebuild-damaged", Created: in.Now}
		if ok {
			rec.PrefixLen, rec.Gateway = r.Subnet.Bits(), r.Gateway
		}
		if owner == "" {
			out.Unattributed = append(out.Unattributed, d.IP.String())
		}
		out.Records = append(out.Records, rec)
		out.DamagedKept++
	}
	for _, ip := range in.Old.Unreadable {
		if !out.claim(ip) {
			continue
		}
		rs, r, _ := RangeOf(out.Sets, ip)
		out.Records = append(out.Records, &allocator.Record{IP: ip, RangeSet: rs, Network: in.Network,
			State: allocator.StatePending, Source: "rebuild-unreadable-page", Created: in.Now,
			PrefixLen: r.Subnet.Bits(), Gateway: r.Gateway})
		out.Unattributed = append(out.Unattributed, ip.String())
		out.DamagedKept++
	}
	return out
}

// claim reports whether ip is still free in the rebuilt store, and takes it.
func (out *Rebuilt) claim(ip netip.Addr) bool {
	if out.claimed[ip] {
		return false
	}
	out.claimed[ip] = true
	return true
}

// fromRuntime adds a committed record of the sandbox for each of its
// addresses in the network's range sets (all of them when unknown).
func (out *Rebuilt) fromRuntime(in RebuildInput, sa SandboxAddrs) {
	sb := sa.Sandbox
	for _, ip := range sa.IPs {
		rs, r, ok := RangeOf(in.Sets, ip)
		if len(in.Sets) > 0 && !ok || !out.claim(ip) {
			continue // another network's address, or listed twice
		}
		rec := &allocator.Record{
			IP: ip, RangeSet: rs, ContainerID: sb.ID, IfName: ReReserveIfName, Network: in.Network,
			PodNamespace: sb.PodNamespace, PodName: sb.PodName, PodUID: sb.PodUID,
			State: allocator.StateCommitted, Source: "rebuild", Created: in.Now, Committed: in.Now,
		}
		if ok {
			rec.PrefixLen, rec.Gateway = r.Subnet.Bits(), r.Gateway
		}
		out.Records = append(out.Records, rec)
		out.FromCRI++
	}
}
