package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// logWith returns a logger writing to stderr (which runtimes keep in their
// logs) with attrs on every line. It is made only when there is something to
// log: most calls log nothing, and slog formats a logger's attributes as soon
// as it is made, which would cost every exec.
func logWith(attrs ...any) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With(append([]any{"plugin", "hostlease"}, attrs...)...)
}

// openStore opens the network's store for one operation; with create it makes
// the store on first use. Errors are returned as they are (callers decide what
// missing or unreadable state means for their verb); storeError codes them.
func openStore(c *allocator.Config, create, readOnly bool) (*allocator.Store, error) {
	return allocator.Open(allocator.StorePath(c.StoreDir, c.Network),
		allocator.OpenOptions{LockTimeout: c.LockTimeout, Create: create, ReadOnly: readOnly})
}

// storeError codes a store failure: 11 (try again later) for a lock timeout or
// a store waiting to be rebuilt, 5 for other I/O failures.
func storeError(c *allocator.Config, err error) error {
	var cerr *types.Error
	switch {
	case errors.As(err, &cerr):
		return cerr
	case errors.Is(err, allocator.ErrLockTimeout):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	case errors.Is(err, allocator.ErrStoreUnreadable):
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("%v; hostlease-gc sets it aside and rebuilds it from the runtime (or run `hostlease-gc rebuild`)", err), "")
	}
	return types.NewError(types.ErrIOFailure, fmt.Sprintf("store %s: %v", allocator.StorePath(c.StoreDir, c.Network), err), "")
}

// storeExists reports whether the network's store file exists.
func storeExists(c *allocator.Config) bool {
	_, err := os.Stat(allocator.StorePath(c.StoreDir, c.Network))
	return err == nil
}

// hostLocalStateExists reports whether host-local left state for the network.
func hostLocalStateExists(c *allocator.Config) bool {
	_, err := os.Stat(allocator.HostLocalDir(c.HostLocalDir, c.Network))
	return err == nil
}

// kick tells hostlease-gc to sweep now: it watches this file's mtime.
func kick(c *allocator.Config) {
	path := filepath.Join(c.StoreDir, ".kick")
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			f.Close()
		}
	}
}
