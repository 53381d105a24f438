package main

import (
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// takeOverNetnsCheck makes the plugin answer skel's "CNI_NETNS is not the
// plugin's own network namespace" check itself, without blocking on any
// input.
//
// skel (containernetworking/cni v1.3.1) runs that check after ADD and DEL by
// opening CNI_NETNS read-only with a blocking open(2) (vishvananda/netns
// GetFromPath): a FIFO without a writer, or a device whose open waits (a
// serial line), keeps the plugin from ever exiting after its work is done and
// its result printed. host-local built with the same skel (plugins v1.9.1,
// as pinned) hangs the same way; skel before cni v1.2 had no such check. The
// check's answers are: the path cannot be opened → no
// objection (DEL of a deleted netns must succeed); it is the plugin's own
// namespace → error 8 (ErrInvalidNetNS) after the verb; anything else → no
// objection. takeOverNetnsCheck gives the same answers from an O_PATH open,
// which never blocks, never runs a device's open, and still follows links as
// skel's open does.
//
// For ADD and DEL, unless the runtime set CNI_NETNS_OVERRIDE itself, it sets
// CNI_NETNS_OVERRIDE=1 for skel (so skel skips its own open) and returns the
// check to run after skel's dispatch succeeded; for every other case it
// returns nil and changes nothing.
func takeOverNetnsCheck() func() *types.Error {
	switch os.Getenv("CNI_COMMAND") {
	case "ADD", "DEL":
	default:
		return nil
	}
	if o := os.Getenv("CNI_NETNS_OVERRIDE"); strings.ToUpper(o) == "TRUE" || o == "1" {
		return nil
	}
	path := os.Getenv("CNI_NETNS")
	if err := os.Setenv("CNI_NETNS_OVERRIDE", "1"); err != nil {
		return nil // skel then runs its own check, as before
	}
	return func() *types.Error { return checkNotOwnNetns(path) }
}

// checkNotOwnNetns answers skel's check for path (see takeOverNetnsCheck):
// error 8 when path is this process's network namespace, nil otherwise.
func checkNotOwnNetns(path string) *types.Error {
	if path == "" {
		return nil
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var target, own unix.Stat_t
	if err := unix.Fstat(fd, &target); err != nil {
		return nil
	}
	// The plugin never changes its network namespace, so the process's is
	// every thread's.
	if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
		return types.NewError(types.ErrInvalidNetNS, "get plugin's netns failed", "")
	}
	if target.Dev == own.Dev && target.Ino == own.Ino {
		return types.NewError(types.ErrInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same", "")
	}
	return nil
}
