package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hostlease/hostlease/internal/trustfs"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// cmdStatus reports whether ADD can be served. containerd 2.x turns a STATUS
// error into NetworkReady=false, kubelet then reports the node Ready=False,
// the node lifecycle controller taints it not-ready:NoExecute, and 300 s
// later every pod without a toleration is evicted. So STATUS fails (code 50)
// only when no ADD can succeed at all: the store file is unreadable (waiting
// for hostlease-gc to rebuild it) or cannot be written, or the store does not
// exist yet and the data dir cannot be written to create it, or the store or
// its data dir is refused by trustfs's contract (a symlink, another user's,
// writable by group or others). A full range set
// is an alert (hostlease-gc's metrics), not a node outage: STATUS reports it
// only with ipam "failStatusOnExhaustion": true.
//
// An ipam section that names no range (netconf.NamesNoRange) gets success, as
// host-local's STATUS gives it: there is no range and often no dataDir to
// check (Multus's STATUS hands its delegates configs rebuilt without them),
// and its ADD, CHECK and DEL are refused (code 7) all the same. Any other
// config Load refuses fails STATUS with Load's error.
func cmdStatus(args *skel.CmdArgs) error {
	c, err := loadConfig(args, "STATUS")
	if err != nil {
		if netconf.NamesNoRange(args.StdinData) {
			return nil
		}
		return err
	}
	if c.Marker {
		return nil
	}
	unavailable := func(format string, a ...any) error {
		return types.NewError(allocator.ErrStatusUnavailable, fmt.Sprintf("network %s: ", c.Network)+fmt.Sprintf(format, a...), "")
	}
	path := store.FilePath(c.StoreDir, c.Network)
	if !storeExists(c) {
		if d, err := trustfs.OpenDir(c.StoreDir); err == nil {
			d.Close()
		} else if trustfs.IsUntrusted(err) {
			return unavailable("%v; ADD fails until it is fixed", err)
		}
		if dir, err := writableDir(c.StoreDir); err != nil {
			return unavailable("data dir %s cannot be written (%v): no store can be created; ADD fails until it can", dir, err)
		}
		return nil
	}
	if err := syscall.Access(path, 2 /* W_OK */); err != nil {
		return unavailable("store %s cannot be written: %v (%s); ADD fails until it can", path, err, errnoName(err))
	}
	var full []int
	s, err := openStore(c, store.OpenOptions{ReadOnly: true})
	if err == nil {
		if c.FailStatusOnExhaustion {
			err = s.View(func(tx *store.Tx) error {
				full = allocator.FullRangeSets(tx, c.RangeSets)
				return nil
			})
		}
		s.Close()
	}
	switch {
	case errors.Is(err, store.ErrUnreadable):
		// Damage found at open: ADD cannot be served until the rebuild.
		return unavailable("%v; waiting for hostlease-gc to rebuild it", err)
	case store.IsEnvironmentError(err):
		return unavailable("%v; ADD fails until it can be opened", err)
	case errors.Is(err, store.ErrPageDamaged):
		// Some pages are readable: ADDs that do not meet the damage succeed.
		return nil
	case errors.Is(err, store.ErrSchema):
		return unavailable("%v; ADD fails on this store", err)
	case err != nil:
		return storeError(c, err)
	}
	if len(full) == 0 {
		return nil
	}
	var parts []string
	for _, i := range full {
		parts = append(parts, fmt.Sprintf("range set %d", i))
	}
	return unavailable("no free address in %s; ADD will fail until addresses are released (failStatusOnExhaustion is on)", strings.Join(parts, ", "))
}

// writableDir checks that dir, or the nearest existing directory above it
// (which a first ADD would create it in), can be written; it returns the
// directory it checked.
func writableDir(dir string) (string, error) {
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return dir, syscall.ENOTDIR
			}
			return dir, syscall.Access(dir, 2 /* W_OK */)
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, os.ErrNotExist) || parent == dir {
			return dir, err
		}
		dir = parent
	}
}

func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return store.ErrnoName(errno)
	}
	return "?"
}
