package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// cmdDel releases the attachment's addresses. It never fails for missing
// state: an unknown container, a missing data dir, or a missing, empty,
// truncated or garbage store all succeed with a log line (the store is left as
// evidence), because a DEL that cannot succeed is retried forever and blocks the
// sandbox name. It fails only when it knows of an allocation it could not free.
func cmdDel(args *skel.CmdArgs) error {
	c, err := allocator.LoadConfig(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if c.Marker {
		return nil // the IPAM plugin's own DEL releases
	}
	log := func() *slog.Logger {
		return logWith("verb", "DEL", "network", c.Network, "containerID", args.ContainerID, "ifname", args.IfName)
	}
	create := false
	if !storeExists(c) {
		if !hostLocalStateExists(c) {
			log().Info("no store for this network: nothing to release")
			return nil
		}
		create = true // first use after host-local: import, then release
	}
	s, err := openStore(c, create, false)
	if err != nil {
		if errors.Is(err, allocator.ErrStoreUnreadable) {
			log().Warn("store unreadable: treating as nothing to release; left in place for hostlease-gc", "error", err)
			return nil
		}
		return storeError(c, err)
	}
	defer s.UnlockForExit()
	now := time.Now()
	var released []*allocator.Record
	err = s.Update(func(tx *allocator.Tx) error {
		if _, err := tx.MigrateOnce(allocator.HostLocalDir(c.HostLocalDir, c.Network), c.Network, c.RangeSets, now); err != nil {
			return err
		}
		released, err = allocator.Release(tx, args.ContainerID, args.IfName, "DEL", "plugin", now)
		return err
	})
	if err != nil {
		if errors.Is(err, allocator.ErrStoreUnreadable) {
			log().Warn("store unreadable: treating as nothing to release; left in place for hostlease-gc", "error", err)
			return nil
		}
		return storeError(c, err)
	}
	if len(released) == 0 {
		log().Info("no allocation for this attachment: nothing to release")
	}
	return nil
}
