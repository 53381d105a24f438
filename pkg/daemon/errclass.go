package daemon

import (
	"errors"
	"syscall"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Store error classes, the values of hostlease_store_errors_total{class}.
const (
	// ClassEnvironment: the system, not the file (EROFS, ENOSPC, EMFILE,
	// EACCES, EIO...). Skipped this sweep; never set aside or rebuilt.
	ClassEnvironment = "environment"
	// ClassUnreadable: the file is not a usable store. Set aside and rebuilt
	// from CRI, only with a complete CRI answer.
	ClassUnreadable = "unreadable"
	// ClassDamagedPage: the store opened but a page is invalid. Reported;
	// nothing reclaimed on the network; an operator rebuilds it.
	ClassDamagedPage = "damaged_page"
	// ClassOther: anything else (a lock held too long, a store of another
	// schema: never set aside nor rebuilt). Looked at again next sweep.
	ClassOther = "other"
)

// ErrorClass sorts a store error by what the daemon may do about it; "" for
// nil. The environment is checked first: whatever else an error says, one
// that carries an errno of the system never leads to a rebuild.
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case store.IsEnvironmentError(err):
		return ClassEnvironment
	case errors.Is(err, store.ErrUnreadable):
		return ClassUnreadable
	case errors.Is(err, store.ErrPageDamaged):
		return ClassDamagedPage
	}
	return ClassOther
}

// errnoOf is the symbolic errno an environment error carries ("EROFS"), or "".
func errnoOf(err error) string {
	var ioe *store.IOError
	if errors.As(err, &ioe) {
		if e := ioe.Errno(); e != 0 {
			return store.ErrnoName(e)
		}
	}
	// A refused path (store.ErrUntrusted) stands for ELOOP (a symlink) or
	// EPERM (an owner or a mode).
	var errno syscall.Errno
	if errors.Is(err, store.ErrUntrusted) && errors.As(err, &errno) {
		return store.ErrnoName(errno)
	}
	return ""
}
