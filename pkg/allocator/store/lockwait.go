//go:build unix

package store

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// errLockWait is returned by the open hook when the store lock was not had
// within the lock timeout; Open reports it as ErrLockTimeout.
var errLockWait = errors.New("lock wait timed out")

// waitLockOpen is a bbolt OpenFile hook that opens the store and then waits,
// blocked in the kernel, for the flock bbolt takes right after opening
// (exclusive for read-write, shared for read-only). Holding it on the very file
// bbolt uses makes bbolt's own flock succeed at once.
//
// Without it, bbolt polls: flock(LOCK_NB), and on EWOULDBLOCK sleeps 50ms and
// tries again. Each transaction holds the lock ~2ms, so with a few dozen plugin
// processes (a burst of pod starts) a poller keeps finding the lock taken and
// waits for seconds. Measured with 32 processes: p99 4.3s, max 9.7s against the
// 10s default lockTimeout, i.e. spurious CNI error 11. A blocked flock is woken
// as soon as the lock is released.
//
// On timeout the waiting goroutine is abandoned: when it gets the lock later it
// closes the file, which releases the lock.
func waitLockOpen(exclusive bool, timeout time.Duration, dir *trustfs.Dir) func(string, int, os.FileMode) (*os.File, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	return func(name string, flag int, mode os.FileMode) (*os.File, error) {
		f, err := openBlocking(dir, name, flag)
		if err != nil {
			return nil, err
		}
		fd := int(f.Fd())
		if err := syscall.Flock(fd, how|syscall.LOCK_NB); err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
			return f, nil // got it, or cannot lock this way: bbolt's own flock decides
		}
		var mu sync.Mutex
		abandoned := false
		done := make(chan error, 1)
		go func() {
			var err error
			for err = syscall.Flock(fd, how); errors.Is(err, syscall.EINTR); err = syscall.Flock(fd, how) {
			}
			mu.Lock()
			defer mu.Unlock()
			if abandoned {
				f.Close()
				return
			}
			done <- err
		}()
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-done:
			return f, nil // on a flock error, bbolt's own flock reports it
		case <-timer.C:
		}
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-done:
			return f, nil
		default:
			abandoned = true
			return nil, errLockWait
		}
	}
}

// unlockFile releases the flock held on f (see Store.UnlockForExit).
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// openBlocking opens the store file name in dir (opened by openDataDir) by
// trustfs's contract: relative to the directory's descriptor, never through
// a symlink, and only a regular file owned by this process's user or root
// and not writable by group or others (one fstat, before the lock is waited
// for: another user's lock is never waited on). The *os.File is made with
// os.NewFile on a blocking descriptor, so that Go does not try to register it
// with its network poller (which a regular file never is, but the try starts
// the poller: epoll and its wake-up fd, for nothing, in every plugin exec).
func openBlocking(dir *trustfs.Dir, name string, flag int) (*os.File, error) {
	return dir.OpenFile(filepath.Base(name), flag)
}
