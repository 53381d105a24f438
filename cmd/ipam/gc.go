package main

import (
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// cmdGC releases every reservation of this network whose attachment is not in
// cni.dev/valid-attachments. Only this network's store is touched. A config
// without the key is refused: treating it as an empty list would free every
// address on the node.
//
// The commit marker collects too: the spec says a plugin must forward GC to its
// IPAM, but the reference plugins (bridge v1.9.1: "FIXME GC") do not, so in a
// conflist the marker entry is the only hostlease that libcni's GC reaches.
func cmdGC(args *skel.CmdArgs) error {
	c, err := netconf.Load(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if !storeExists(c) {
		return nil
	}
	if c.ValidAttachments == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"cni.dev/valid-attachments: missing; refusing to garbage-collect without the list of attachments in use", "")
	}
	s, err := openStore(c, store.OpenOptions{})
	if err != nil {
		return storeError(c, err)
	}
	defer s.Close()
	var gone []*allocator.Record
	var notes txNotes
	err = s.Update(func(tx *store.Tx) error {
		gone, err = allocator.GarbageCollect(tx, c.ValidAttachments, time.Now())
		notes = notesOf(tx)
		return err
	})
	if err != nil {
		return storeError(c, err)
	}
	// Damaged records are kept (their owner cannot be told) and reported.
	notes.log(func() *slog.Logger { return logWith("verb", "GC", "network", c.Network) })
	for _, r := range gone {
		logWith().Info("GC released", "network", c.Network, "ip", r.IP, "containerID", r.ContainerID, "ifname", r.IfName, "pod", r.PodRef())
	}
	return nil
}
