//go:build linux

package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// netnsEvents are the inotify events that mean "an entry of the directory
// went away": the runtime removes a sandbox's netns file (after unmounting
// it) when it tears the sandbox down, including after a failed ADD. The
// others say the watch itself ended (the directory was removed, moved or
// unmounted) and must be set up again.
const (
	netnsGoneMask  = unix.IN_DELETE | unix.IN_MOVED_FROM
	netnsWatchMask = netnsGoneMask | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
)

// WatchNetnsDir reports, on the returned channel, that an entry of dir
// disappeared: at most one pending report, sent debounce after the first
// removal of a burst (a node tearing down ten pods wakes the daemon once). A
// directory that does not exist yet (or goes away) is looked for again every
// retry. The channel is never closed; the watch ends with ctx.
func WatchNetnsDir(ctx context.Context, dir string, debounce, retry time.Duration, log *slog.Logger) <-chan struct{} {
	out := make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		log.Warn("cannot watch --netns-dir: sweeps run on the interval and on exhaustion only", "netnsDir", dir, "error", err)
		return out
	}
	// A non-blocking fd in an *os.File reads through Go's poller, so Close
	// ends a read that waits.
	f := os.NewFile(uintptr(fd), "inotify")
	gone := make(chan struct{}, 1)
	lost := make(chan int32, 16)
	go readInotify(f, gone, lost)
	wd, everWatched := -1, false
	watch := func() {
		w, err := unix.InotifyAddWatch(fd, dir, netnsWatchMask)
		if err != nil {
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
				log.Warn("cannot watch --netns-dir yet", "netnsDir", dir, "error", err)
			}
			return
		}
		wd = w
		log.Info("watching --netns-dir for removed netns", "netnsDir", dir)
		if everWatched {
			// Entries may have gone while nothing watched.
			select {
			case gone <- struct{}{}:
			default:
			}
		}
		everWatched = true
	}
	// The first watch is set up before returning: a removal after the
	// caller's first sweep is never missed.
	watch()
	go func() {
		defer f.Close()
		retryTick := time.NewTicker(retry)
		defer retryTick.Stop()
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-gone:
				if fire == nil {
					fire = time.After(debounce)
				}
			case <-fire:
				fire = nil
				select {
				case out <- struct{}{}:
				default: // a report is already pending
				}
			case w := <-lost:
				if int(w) != wd {
					continue // an older watch's end, already handled
				}
				if wd >= 0 {
					// A moved directory keeps its watch: drop it, watch the path.
					_, _ = unix.InotifyRmWatch(fd, uint32(wd))
				}
				wd = -1
				log.Warn("--netns-dir watch ended (directory removed or moved); looking for it again", "netnsDir", dir)
			case <-retryTick.C:
				if wd < 0 {
					watch()
				}
			}
		}
	}()
	return out
}

// readInotify reads events until f is closed, signalling on gone for a
// removed entry and on lost (with the watch descriptor) when a watch ended.
func readInotify(f *os.File, gone chan<- struct{}, lost chan<- int32) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	signal := func(c chan<- struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				signal(gone) // events were lost: a sweep finds out what changed
			case ev.Mask&netnsGoneMask != 0:
				signal(gone)
			case ev.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0:
				select {
				case lost <- ev.Wd:
				default:
				}
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
