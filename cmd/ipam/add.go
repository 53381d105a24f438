package main

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// cmdAdd reserves one address per range set, as host-local would, and records
// who holds it. The reservation is durable before the result is printed.
func cmdAdd(args *skel.CmdArgs) error {
	c, err := loadConfig(args, "ADD")
	if err != nil {
		return err
	}
	if c.Marker {
		return markerAdd(args, c)
	}
	result := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if c.IPAM.ResolvConf != "" {
		dns, err := parseResolvConf(c.IPAM.ResolvConf)
		if err != nil {
			return types.NewError(types.ErrInvalidNetworkConfig, "ipam.resolvConf: "+err.Error(), "")
		}
		result.DNS = *dns
	}
	req := allocator.AllocateRequest{
		Network:   c.Network,
		RangeSets: c.RangeSets,
		Owner:     ownerOf(args),
		Now:       time.Now(),
		View:      allocator.OSNetnsView{},
		Walk:      newHoldersWalk(),
	}
	req.Owner.NetnsWitness = netnsWitness(args.Netns)
	req.Requested = c.IPAM.Requested
	out, err := reserve(c, req)
	if err != nil {
		if errors.Is(err, store.ErrUnreadable) || store.IsDamage(err) {
			kick(c) // the daemon rebuilds it at once instead of at its next sweep
		}
		return storeError(c, err)
	}
	out.log(func() *slog.Logger {
		return logWith("verb", "ADD", "network", c.Network, "containerID", args.ContainerID)
	})
	if out.aerr != nil {
		if out.aerr.Code == allocator.ErrRangeExhausted {
			kick(c)
		}
		return out.aerr
	}
	recs := out.recs
	for _, r := range recs {
		result.IPs = append(result.IPs, ipConfig(r))
	}
	result.Routes = c.IPAM.Routes
	return printResult(result, c.CNIVersion)
}

// reserved is what an ADD's store transaction did.
type reserved struct {
	recs     []*allocator.Record // the attachment's records, one per range set
	aerr     *types.Error        // why no address was reserved (the transaction's writes are kept)
	vanished []*allocator.Record // imported host-local records released: host-local removed their file
	imported int                 // host-local reservations imported (first use, or after an export)
	// conflicts are host-local reservations of addresses the store holds
	// for another attachment (kept for the store's holder).
	conflicts []allocator.ImportConflict
	notes     txNotes
}

// errWalkFirst rolls back an ADD's transaction that kept records until the
// walk for namespaces still held (allocator.HoldersWalk).
var errWalkFirst = errors.New("the walk for namespaces still held comes first")

// reserve opens the network's store (made on first use) and runs the ADD's
// transaction in it, then releases the store's lock: the reservation is
// durable, and concurrent calls wait for the lock while the result is built
// and printed. When the transaction kept records until a walk for the
// namespaces still held (req.Walk), it is rolled back, the lock released
// for the walk, and the ADD runs again in a new transaction: the walk of
// /proc, which takes long on a busy node, is never made holding the lock.
func reserve(c *netconf.Config, req allocator.AllocateRequest) (reserved, error) {
	for {
		s, err := openStore(c, store.OpenOptions{Create: true})
		if err != nil {
			return reserved{}, err
		}
		out, err := reserveIn(s, c, req)
		s.UnlockForExit()
		if !errors.Is(err, errWalkFirst) {
			return out, err
		}
		req.Walk.Holders, req.Walk.Err = req.View.Holders()
		req.Walk.Read = true
	}
}

// reserveIn runs an ADD's store transaction in s: the merge of host-local's
// state (on first use or after an export, before any address is chosen),
// the release of vanished host-local records, the allocation.
func reserveIn(s *store.Store, c *netconf.Config, req allocator.AllocateRequest) (reserved, error) {
	var out reserved
	err := s.Update(func(tx *store.Tx) error {
		hlDir := allocator.HostLocalDir(c.HostLocalDir, c.Network)
		merged, err := allocator.SyncHostLocal(tx, hlDir, c.Network, c.RangeSets, allocator.ByPlugin, req.Now)
		if err != nil {
			return err
		}
		out.imported, out.conflicts = merged.Imported, merged.Conflicts
		// While imported host-local records remain, those whose file
		// host-local's own DEL removed are released (one cursor step once
		// none remain).
		if out.vanished, err = allocator.ReleaseHostLocalGone(tx, hlDir, allocator.ByPlugin, req.Now); err != nil {
			return err
		}
		out.recs, out.aerr = allocator.Allocate(tx, req)
		if req.Walk.Deferred() {
			return errWalkFirst
		}
		out.notes = notesOf(tx)
		if out.aerr != nil && out.aerr.Code == types.ErrIOFailure {
			return out.aerr // roll back: the transaction may be half-applied
		}
		// Otherwise keep the transaction's writes even on failure:
		// host-local keeps its moved round-robin point, and the exhaustion
		// count must reach the daemon.
		return nil
	})
	return out, err
}

// log writes what a committed ADD transaction did besides allocating.
func (r reserved) log(log func() *slog.Logger) {
	if r.imported > 0 {
		log().Info("imported host-local reservations", "count", r.imported)
	}
	logConflicts(log, r.conflicts)
	for _, v := range r.vanished {
		log().Info("released an imported host-local reservation whose file host-local removed", "ip", v.IP, "heldBy", v.ContainerID)
	}
	r.notes.log(log)
}

// ipConfig is a record as a CNI result entry.
func ipConfig(r *allocator.Record) *current.IPConfig {
	ipc := &current.IPConfig{
		Address: net.IPNet{IP: r.IP.AsSlice(), Mask: net.CIDRMask(r.PrefixLen, r.IP.BitLen())},
	}
	if r.Gateway.IsValid() {
		ipc.Gateway = r.Gateway.AsSlice()
	}
	return ipc
}
