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
	s, err := openStore(c, store.OpenOptions{Create: true})
	if err != nil {
		if errors.Is(err, store.ErrUnreadable) {
			kick(c) // the daemon rebuilds it at once instead of at its next sweep
		}
		return storeError(c, err)
	}

	req := allocator.AllocateRequest{
		Network:   c.Network,
		RangeSets: c.RangeSets,
		Owner:     ownerOf(args),
		Now:       time.Now(),
		View:      allocator.OSNetnsView{},
	}
	req.Owner.NetnsWitness = netnsWitness(args.Netns)
	req.Requested = c.IPAM.Requested
	var recs, vanished []*allocator.Record
	var aerr *types.Error
	var notes txNotes
	imported := 0
	err = s.Update(func(tx *store.Tx) error {
		hlDir := allocator.HostLocalDir(c.HostLocalDir, c.Network)
		n, err := allocator.MigrateOnce(tx, hlDir, c.Network, c.RangeSets, req.Now)
		if err != nil {
			return err
		}
		imported = n
		// While imported host-local records remain, those whose file
		// host-local's own DEL removed are released (one cursor step once
		// none remain).
		if vanished, err = allocator.ReleaseVanishedHostLocal(tx, hlDir, req.Now); err != nil {
			return err
		}
		recs, aerr = allocator.Allocate(tx, req)
		notes = notesOf(tx)
		if aerr != nil && aerr.Code == types.ErrIOFailure {
			return aerr // roll back: the transaction may be half-applied
		}
		// Otherwise keep the transaction's writes even on failure:
		// host-local keeps its moved round-robin point, and the exhaustion
		// count must reach the daemon.
		return nil
	})
	// The reservation is durable: release the store lock, which concurrent
	// calls wait for, before building and printing the result.
	s.UnlockForExit()
	log := func() *slog.Logger {
		return logWith("verb", "ADD", "network", c.Network, "containerID", args.ContainerID)
	}
	if err == nil {
		if imported > 0 {
			log().Info("imported host-local reservations", "count", imported)
		}
		for _, r := range vanished {
			log().Info("released an imported host-local reservation whose file host-local removed", "ip", r.IP, "heldBy", r.ContainerID)
		}
		notes.log(log)
	}
	if err != nil {
		if store.IsDamage(err) {
			kick(c)
		}
		return storeError(c, err)
	}
	if aerr != nil {
		if aerr.Code == allocator.ErrRangeExhausted {
			kick(c)
		}
		return aerr
	}
	for _, r := range recs {
		result.IPs = append(result.IPs, ipConfig(r))
	}
	result.Routes = c.IPAM.Routes
	return printResult(result, c.CNIVersion)
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
