package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/internal/trustfs"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// logWith returns a logger writing warnings and errors to stderr, with attrs
// on every line; Info lines are not printed. The plugin's stderr is the
// runtime's: libcni (containerd, CRI-O, podman, cnitool) copies a successful
// plugin's stderr to its own (the runtime's log, podman's terminal), where
// host-local prints nothing, so a call that went as expected (a DEL of an
// unknown container, a GC) is silent and a line means something needs a
// look. What a call changed is in the store's audit log. The logger is made
// only when there is something to log: slog formats a logger's attributes as
// soon as it is made, which would cost every exec (docs/benchmarks.md, "What
// was changed for performance").
func logWith(attrs ...any) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With(append([]any{"plugin", "hostlease"}, attrs...)...)
}

// openStore opens the network's store for one operation, as o says (Create:
// make it on first use; ReadOnly), waiting for its lock as long as the
// config's lockTimeout. Errors are returned as they are (callers decide what
// missing or unreadable state means for their verb); storeError codes them.
func openStore(c *netconf.Config, o store.OpenOptions) (*store.Store, error) {
	o.LockTimeout = c.LockTimeout
	o.By = allocator.ByPlugin
	return store.Open(store.FilePath(c.StoreDir, c.Network), o)
}

// storeError codes a store failure by class (see allocator's errors.go):
// 11 (try again later) for a lock timeout or a store the daemon will set
// aside and rebuild; 5 for an environment error (naming the errno and the
// path), for a damaged page (the operator rebuilds it) and for a store of
// another schema (the operator runs the matching binary); 5 for a store,
// data dir or host-local file refused by trustfs's contract (the message
// names the path, owner, mode and fix); 5 for anything else.
func storeError(c *netconf.Config, err error) error {
	var cerr *types.Error
	switch {
	case errors.As(err, &cerr):
		return cerr
	case errors.Is(err, store.ErrUntrusted):
		return types.NewError(types.ErrIOFailure, err.Error(), "")
	case errors.Is(err, store.ErrLockTimeout):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	case errors.Is(err, store.ErrUnreadable):
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("%v; hostlease-gc sets it aside and rebuilds it from the runtime (or run `hostlease-gc rebuild`)", err), "")
	case errors.Is(err, store.ErrPageDamaged):
		return types.NewError(types.ErrIOFailure,
			fmt.Sprintf("%v; the store is damaged: run `hostlease-gc rebuild --force` for network %s", err, c.Network), "")
	case store.IsEnvironmentError(err):
		return types.NewError(types.ErrIOFailure, "store: "+err.Error(), "")
	case errors.Is(err, store.ErrSchema):
		return types.NewError(types.ErrIOFailure, err.Error(), "")
	}
	return types.NewError(types.ErrIOFailure, fmt.Sprintf("store %s: %v", store.FilePath(c.StoreDir, c.Network), err), "")
}

// storeExists reports whether anything is at the network's store path (a
// symlink there counts: Open refuses it, naming it).
func storeExists(c *netconf.Config) bool {
	_, err := os.Lstat(store.FilePath(c.StoreDir, c.Network))
	return err == nil
}

// txNotes is what a transaction met that must be logged once it is over:
// index repairs (also in the store's audit log) and damaged records (left
// reserved).
type txNotes struct {
	repairs []allocator.IndexRepair
	damaged []allocator.DamagedRecord
}

func notesOf(tx *store.Tx) txNotes {
	return txNotes{repairs: tx.Repairs(), damaged: tx.DamagedSeen()}
}

func (n txNotes) log(log func() *slog.Logger) {
	for _, r := range n.repairs {
		log().Warn("store index repaired from the records", "repair", r.String())
	}
	for _, d := range n.damaged {
		log().Warn("damaged record left reserved (hostlease-gc release IP frees it)", "ip", d.IP, "error", d.Err,
			"readableContainerID", d.ContainerID, "readableIfname", d.IfName)
	}
}

// hostLocalStateExists reports whether host-local left state for the network.
func hostLocalStateExists(c *netconf.Config) bool {
	_, err := os.Stat(allocator.HostLocalDir(c.HostLocalDir, c.Network))
	return err == nil
}

// kick tells hostlease-gc to sweep now: it watches the mtime of
// <dataDir>/.kick. The file is touched relative to the data dir opened by
// trustfs's contract, never through a symlink (a link at .kick, dangling or
// not, is left alone: nothing is created or touched where it points), never a
// FIFO (no block), never a file another user owns or can write. A kick that
// cannot be made is logged: the daemon's next sweep comes all the same.
func kick(c *netconf.Config) {
	err := touchKick(c.StoreDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		logWith("network", c.Network).Warn("could not kick hostlease-gc (it sweeps at its next interval)", "error", err)
	}
}

func touchKick(dir string) error {
	d, err := trustfs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Touch(".kick")
}

// loadConfig loads an invocation's config for verb and warns on stderr, one
// line each, of the ipam keys nothing reads (a typo such as "rangeStrat" is
// otherwise silent): the config is still used, as host-local uses it.
func loadConfig(args *skel.CmdArgs, verb string) (*netconf.Config, error) {
	load := netconf.Load
	if verb == "DEL" {
		load = netconf.LoadForRelease // a release needs no range
	}
	c, err := load(args.StdinData, args.Args)
	if err != nil {
		return nil, err
	}
	for _, k := range c.UnknownKeys {
		logWith("verb", verb, "network", c.Network).Warn("unknown ipam key ignored, as host-local ignores it: a typo? (hostlease-gc doctor checks the config)", "key", k)
	}
	return c, nil
}

// logConflicts logs each host-local reservation a merge found for an
// address the store holds for another attachment (kept for the store's
// holder, audited as import-conflict).
func logConflicts(log func() *slog.Logger, conflicts []allocator.ImportConflict) {
	for _, c := range conflicts {
		log().Warn("host-local reservation conflicts with the store: the address stays reserved for the store's holder and is not handed out (hostlease-gc import lists conflicts)",
			"ip", c.File.IP, "hostLocalContainerID", c.File.ContainerID, "hostLocalIfname", c.File.IfName,
			"storeContainerID", c.StoreContainerID, "storeIfname", c.StoreIfName, "storeRecordDamaged", c.Damaged)
	}
}

// mergeError is a failed SyncHostLocal inside updateAfterMerge.
type mergeError struct{ err error }

func (e *mergeError) Error() string { return e.err.Error() }

// updateAfterMerge runs fn in one write transaction after
// allocator.SyncHostLocal (host-local's state on first use, or what
// host-local changed since an export). When the merge fails (host-local's
// state refused as untrusted, unreadable, or its write failed) the
// transaction is rolled back, the failure logged, and fn runs alone in a
// new one: the merge is redone by the next plugin write and never stops a
// DEL or a GC, which hand nothing out. A config naming no range (a DEL's,
// netconf.LoadForRelease) merges nothing: host-local's files are read
// against the ranges, and the next call that names them merges.
func updateAfterMerge(s *store.Store, c *netconf.Config, now time.Time, log func() *slog.Logger, fn func(*store.Tx) error) ([]allocator.ImportConflict, error) {
	var conflicts []allocator.ImportConflict
	run := func(merge bool) error {
		return s.Update(func(tx *store.Tx) error {
			conflicts = nil
			if merge {
				merged, err := allocator.SyncHostLocal(tx, allocator.HostLocalDir(c.HostLocalDir, c.Network), c.Network, c.RangeSets, allocator.ByPlugin, now)
				if err != nil {
					return &mergeError{err}
				}
				conflicts = merged.Conflicts
			}
			return fn(tx)
		})
	}
	err := run(!c.NoRange)
	var me *mergeError
	if errors.As(err, &me) {
		log().Warn("host-local's state not merged (the next plugin call tries again; an untrusted path: fix it as the error says)", "error", me.err)
		err = run(false)
	}
	return conflicts, err
}
