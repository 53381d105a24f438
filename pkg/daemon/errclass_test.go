package daemon

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Only damage leads to set-aside and rebuild; an errno of the system never
// does, whatever else the error says.
func TestErrorClass(t *testing.T) {
	ioErr := func(errno syscall.Errno) error {
		return &store.IOError{Op: "open", Path: "/d/net.db", Err: errno}
	}
	cases := []struct {
		name  string
		err   error
		class string
		errno string
	}{
		{"nil", nil, "", ""},
		{"read-only", ioErr(syscall.EROFS), ClassEnvironment, "EROFS"},
		{"too many open files", ioErr(syscall.EMFILE), ClassEnvironment, "EMFILE"},
		{"file table full", ioErr(syscall.ENFILE), ClassEnvironment, "ENFILE"},
		{"permission", ioErr(syscall.EACCES), ClassEnvironment, "EACCES"},
		{"operation not permitted (immutable)", ioErr(syscall.EPERM), ClassEnvironment, "EPERM"},
		{"I/O error", ioErr(syscall.EIO), ClassEnvironment, "EIO"},
		{"full", ioErr(syscall.ENOSPC), ClassEnvironment, "ENOSPC"},
		{"symlink", ioErr(syscall.ELOOP), ClassEnvironment, "ELOOP"},
		{"environment wrapped with unreadable too", fmt.Errorf("%w: %w", store.ErrUnreadable, ioErr(syscall.EIO)), ClassEnvironment, "EIO"},
		{"unreadable", fmt.Errorf("%w: x.db is empty", store.ErrUnreadable), ClassUnreadable, ""},
		{"damaged page", fmt.Errorf("%w: page 7", store.ErrPageDamaged), ClassDamagedPage, ""},
		{"something else", errors.New("lock timeout"), ClassOther, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ErrorClass(tc.err); got != tc.class {
				t.Errorf("ErrorClass = %q, want %q", got, tc.class)
			}
			if got := errnoOf(tc.err); got != tc.errno {
				t.Errorf("errnoOf = %q, want %q", got, tc.errno)
			}
		})
	}
}
