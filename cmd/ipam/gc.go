package main

import (
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// cmdGC releases every reservation of this network whose attachment is not in
// cni.dev/valid-attachments. Only this network's store is touched. A GC
// without the list (neither spelling, or null) releases nothing and succeeds,
// with a warning saying why: treating it as an empty list would free every
// address on the node, and failing it fails every GC of the conflist (cnitool
// v1.3.1 sends no list; host-local's GC is a no-op). An empty list is a list:
// every reservation of the network is released.
//
// The commit marker collects too: the spec says a plugin must forward GC to its
// IPAM, but the reference plugins (bridge v1.9.1: "FIXME GC") do not, so in a
// conflist the marker entry is the only hostlease that libcni's GC reaches.
func cmdGC(args *skel.CmdArgs) error {
	c, err := loadConfig(args, "GC")
	if err != nil {
		return err
	}
	if c.ValidAttachments == nil {
		logWith("verb", "GC", "network", c.Network).Warn(
			"GC without cni.dev/valid-attachments: released nothing (an absent list is not an empty one; the runtime must name the attachments in use)")
		return nil
	}
	if !storeExists(c) {
		return nil
	}
	s, err := openStore(c, store.OpenOptions{})
	if err != nil {
		return storeError(c, err)
	}
	defer s.Close()
	var gone []*allocator.Record
	var notes txNotes
	now := time.Now()
	log := func() *slog.Logger { return logWith("verb", "GC", "network", c.Network) }
	// As DEL: host-local's state first (what host-local reserved since an
	// export is then collected too).
	conflicts, err := updateAfterMerge(s, c, now, log, func(tx *store.Tx) error {
		var err error
		gone, err = allocator.GarbageCollect(tx, c.ValidAttachments, now)
		notes = notesOf(tx)
		return err
	})
	logConflicts(log, conflicts)
	if err != nil {
		return storeError(c, err)
	}
	// Damaged records are kept (their owner cannot be told) and reported.
	notes.log(log)
	for _, r := range gone {
		logWith().Info("GC released", "network", c.Network, "ip", r.IP, "containerID", r.ContainerID, "ifname", r.IfName, "pod", r.PodRef())
	}
	return nil
}
