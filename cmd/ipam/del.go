package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// cmdDel releases the attachment's addresses. It never fails for missing
// state: an unknown container, a missing data dir, or a missing, empty,
// truncated or garbage store all succeed with a log line (the store is left as
// evidence), because a DEL that cannot succeed is retried forever and blocks the
// sandbox name. A store of another schema is left alone and logged the same
// way. It fails only when it knows of an allocation it could not free.
//
// A config whose ipam names no range (netconf.LoadForRelease) releases what
// the store at its dataDir holds for the attachment: records are found by
// container ID and ifname, not by range. Multus v4.3.0 DELs its cluster
// network with such a config; host-local refuses it (code 7) and the pod
// can never be deleted.
//
// A DEL that finds nothing to release needs no write: when the store cannot
// be opened for writing because of the environment (read-only file system,
// immutable file, permissions, no space), it looks read-only and exits 0 if
// the attachment holds nothing; only an allocation it can see and cannot
// release fails it (CNI 5 naming the errno). A damaged record that may be
// the attachment's is logged and left reserved (an operator releases it).
// State refused by trustfs's contract (a symlink, another user's file or
// directory) releases nothing and succeeds, logged (logUntrusted says why).
func cmdDel(args *skel.CmdArgs) error {
	c, err := loadConfig(args, "DEL")
	if err != nil {
		return err
	}
	if c.Marker {
		return nil // the IPAM plugin's own DEL releases
	}
	log := func() *slog.Logger {
		return logWith("verb", "DEL", "network", c.Network, "containerID", args.ContainerID, "ifname", args.IfName)
	}
	if c.NoRange {
		log().Info("config names no range (a runtime rebuilt it from CNI's schema): releasing what the store holds for this attachment", "dataDir", c.StoreDir)
	}
	create := false
	if !storeExists(c) {
		if c.NoRange || !hostLocalStateExists(c) {
			log().Info("no store for this network: nothing to release")
			return nil
		}
		create = true // first use after host-local: import, then release
	}
	s, err := openStore(c, store.OpenOptions{Create: create})
	if err != nil {
		switch {
		case errors.Is(err, store.ErrUntrusted):
			logUntrusted(log, err)
			return nil
		case store.IsDamage(err):
			log().Warn("store unreadable: treating as nothing to release; left in place for hostlease-gc", "error", err)
			return nil
		case store.IsEnvironmentError(err):
			return delReadOnly(c, args, log, err)
		case errors.Is(err, store.ErrSchema):
			// Not damage: its records may be intact, for a binary of that
			// schema. None can be released here; a failing DEL would be
			// retried forever, so the leak is left to that version's daemon.
			log().Warn("store of another schema: treating as nothing to release; left as it is", "error", err)
			return nil
		}
		return storeError(c, err)
	}
	defer s.UnlockForExit()
	now := time.Now()
	var released []*allocator.Record
	var conflicts []allocator.ImportConflict
	var notes txNotes
	// As ADD, host-local's state first (first use, or changes since an
	// export): DEL then frees what host-local reserved for this attachment.
	conflicts, err = updateAfterMerge(s, c, now, log, func(tx *store.Tx) error {
		var err error
		released, err = allocator.Release(tx, attachmentOf(args), allocator.Why{Reason: "DEL", By: allocator.ByPlugin}, now)
		notes = notesOf(tx)
		return err
	})
	if err != nil {
		switch {
		case store.IsDamage(err):
			log().Warn("store damaged: treating as nothing to release; left in place for hostlease-gc", "error", err)
			return nil
		case store.IsEnvironmentError(err) && len(released) == 0:
			// Nothing was reserved; what could not be written was an index
			// repair, which the next writer redoes.
			log().Warn("nothing to release; the store could not be written", "error", err)
			return nil
		}
		return storeError(c, err)
	}
	notes.log(log)
	logConflicts(log, conflicts)
	if len(released) == 0 {
		logNothingToRelease(log, notes.damaged)
	}
	return nil
}

// logUntrusted logs a DEL that refused its state (a store, data dir or
// host-local file that is a symlink, or that another user owns or can
// write: trustfs's contract) and so releases nothing. Such state is neither
// written nor read: it may be another user's, planted to be trusted. DEL
// still succeeds, as for missing state: a DEL that fails is retried forever
// and blocks the sandbox (multus #1498), and succeeding hands nothing out
// twice, because ADD, CHECK and the daemon refuse the same state until the
// operator fixes it; an address the refused store did hold for this
// attachment is then a leak the daemon reclaims by its rules.
func logUntrusted(log func() *slog.Logger, err error) {
	log().Warn("state refused (not trusted): nothing released, nothing written; fix it as the error says", "error", err)
}

// logNothingToRelease logs a DEL that released nothing, naming any damaged
// record the owner index lists for this attachment: it may be its record.
func logNothingToRelease(log func() *slog.Logger, damaged []allocator.DamagedRecord) {
	if len(damaged) == 0 {
		log().Info("no allocation for this attachment: nothing to release")
		return
	}
	var ips []string
	for _, d := range damaged {
		ips = append(ips, d.IP.String())
	}
	log().Warn("no readable allocation for this attachment; a damaged record may belong to it and stays reserved until an operator releases it (hostlease-gc release IP)",
		"damagedIPs", strings.Join(ips, ","))
}

// delReadOnly finishes a DEL whose read-write open failed with rwErr, an
// environment error: it looks at the store read-only and succeeds when the
// attachment holds nothing there.
func delReadOnly(c *netconf.Config, args *skel.CmdArgs, log func() *slog.Logger, rwErr error) error {
	s, err := openStore(c, store.OpenOptions{ReadOnly: true})
	if err != nil {
		if store.IsDamage(err) {
			log().Warn("store unreadable: treating as nothing to release; left in place for hostlease-gc", "error", err)
			return nil
		}
		if errors.Is(err, os.ErrNotExist) {
			log().Info("no store for this network: nothing to release")
			return nil
		}
		return storeError(c, rwErr) // cannot tell whether anything is reserved
	}
	defer s.Close()
	var recs []*allocator.Record
	var notes txNotes
	err = s.View(func(tx *store.Tx) error {
		recs, err = allocator.AttachmentRecords(tx, attachmentOf(args))
		notes = notesOf(tx)
		return err
	})
	if err != nil {
		if store.IsDamage(err) {
			log().Warn("store damaged: treating as nothing to release; left in place for hostlease-gc", "error", err)
			return nil
		}
		return storeError(c, rwErr)
	}
	notes.log(log)
	if len(recs) == 0 {
		log().Info("store not writable, but nothing is held for this attachment: nothing to release", "error", rwErr)
		logNothingToRelease(log, notes.damaged)
		return nil
	}
	var ips []string
	for _, r := range recs {
		ips = append(ips, r.IP.String())
	}
	return types.NewError(types.ErrIOFailure,
		fmt.Sprintf("cannot release %s held by container %s ifname %s: store: %v", strings.Join(ips, ", "), args.ContainerID, args.IfName, rwErr), "")
}
