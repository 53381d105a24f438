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

// errLockWait is returned when the store lock was not had within the lock
// timeout; Open reports it as ErrLockTimeout.
var errLockWait = errors.New("lock wait timed out")

// flockWait takes the flock of f (exclusive or shared), waiting blocked in
// the kernel until deadline.
//
// A blocked flock is woken as soon as the lock is released. bbolt's own wait
// polls instead: flock(LOCK_NB), and on EWOULDBLOCK it sleeps 50ms and tries
// again. Each transaction holds the lock ~2ms, so with a few dozen plugin
// processes (a burst of pod starts) a poller keeps finding the lock taken and
// can wait for most of the default lockTimeout, i.e. spurious CNI error 11
// (figures in docs/benchmarks.md).
//
// On timeout the waiting goroutine is abandoned: when it gets the lock later
// it closes f, which releases the lock; the caller must not use f then. Any
// other flock error is returned with f still open.
func flockWait(f *os.File, exclusive bool, deadline time.Time) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	fd := int(f.Fd())
	err := syscall.Flock(fd, how|syscall.LOCK_NB)
	if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
		return err
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
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case err := <-done:
		return err
	default:
		abandoned = true
		return errLockWait
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

// dupFile returns a second descriptor of f's open file description: it
// shares f's flock, and closing it leaves f open.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// lockSupported: Open locks and proves the store file itself (lockfile.go).
const lockSupported = true
