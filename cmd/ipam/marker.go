package main

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// markerAdd runs when hostlease is the last plugin of a conflist: every plugin
// before it succeeded, so the attachment's allocations are committed. It passes
// the chain's result through unchanged. Failing to mark is logged, never fatal:
// the pod is healthy, and hostlease-gc also commits what CRI reports READY.
func markerAdd(args *skel.CmdArgs, c *netconf.Config) error {
	conf := &types.NetConf{}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "config: "+err.Error(), "")
	}
	if err := version.ParsePrevResult(conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	log := func() *slog.Logger {
		return logWith("verb", "ADD", "mode", "commit-marker", "network", c.Network, "containerID", args.ContainerID, "ifname", args.IfName)
	}
	if storeExists(c) {
		if n, err := markCommitted(c, args); err != nil {
			log().Warn("could not mark allocations committed", "error", err)
		} else if n == 0 {
			log().Info("no pending allocation for this attachment (ipam is not hostlease, or dataDir differs)")
		}
	} else {
		// The ipam entry creates the store before the chain reaches the
		// marker: none means its ipam is not hostlease or its dataDir differs.
		log().Warn("no hostlease store for this network: nothing to commit (is the ipam type hostlease, with the same dataDir?)", "storeDir", c.StoreDir)
	}
	if conf.PrevResult == nil {
		return types.PrintResult(&current.Result{CNIVersion: conf.CNIVersion}, conf.CNIVersion)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// markCommitted marks the attachment's records committed in one store
// transaction and returns how many changed.
func markCommitted(c *netconf.Config, args *skel.CmdArgs) (int, error) {
	s, err := openStore(c, store.OpenOptions{})
	if err != nil {
		return 0, err
	}
	defer s.UnlockForExit()
	n := 0
	var notes txNotes
	err = s.Update(func(tx *store.Tx) error {
		n, err = allocator.MarkCommitted(tx, attachmentOf(args), time.Now())
		notes = notesOf(tx)
		return err
	})
	notes.log(func() *slog.Logger {
		return logWith("verb", "ADD", "mode", "commit-marker", "network", c.Network, "containerID", args.ContainerID, "ifname", args.IfName)
	})
	return n, err
}

// markerCheck verifies that the chain's allocations were committed.
func markerCheck(args *skel.CmdArgs, c *netconf.Config) error {
	if !storeExists(c) {
		return nil
	}
	recs, notes, err := readAttachment(c, args)
	if err != nil {
		return err
	}
	notes.log(func() *slog.Logger {
		return logWith("verb", "CHECK", "mode", "commit-marker", "network", c.Network, "containerID", args.ContainerID, "ifname", args.IfName)
	})
	for _, r := range recs {
		if r.State != allocator.StateCommitted {
			return types.NewError(types.ErrInternal,
				"allocation "+r.IP.String()+" is still pending: the commit marker did not run for this attachment", "")
		}
	}
	return nil
}

// readAttachment reads the attachment's records from a read-only view of the store,
// with what the read met (damaged records the owner index lists for it).
func readAttachment(c *netconf.Config, args *skel.CmdArgs) ([]*allocator.Record, txNotes, error) {
	s, err := openStore(c, store.OpenOptions{ReadOnly: true})
	if err != nil {
		return nil, txNotes{}, storeError(c, err)
	}
	defer s.Close()
	var recs []*allocator.Record
	var notes txNotes
	err = s.View(func(tx *store.Tx) error {
		recs, err = allocator.AttachmentRecords(tx, attachmentOf(args))
		if err == nil && len(recs) == 0 {
			// In a store exported to host-local, what host-local reserved
			// for this attachment before the next write merges it.
			recs, err = allocator.PendingHostLocal(tx, allocator.HostLocalDir(c.HostLocalDir, c.Network), c.Network, c.RangeSets, attachmentOf(args))
		}
		notes = notesOf(tx)
		return err
	})
	if err != nil {
		return nil, notes, storeError(c, err)
	}
	return recs, notes, nil
}
