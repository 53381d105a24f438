package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

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
// soon as it is made, which would cost every exec (measured 44 us of CPU per
// DEL that logs nothing, d8bbcda).
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
	c, err := netconf.Load(args.StdinData, args.Args)
	if err != nil {
		return nil, err
	}
	for _, k := range c.UnknownKeys {
		logWith("verb", verb, "network", c.Network).Warn("unknown ipam key ignored, as host-local ignores it: a typo? (hostlease-gc doctor checks the config)", "key", k)
	}
	return c, nil
}
