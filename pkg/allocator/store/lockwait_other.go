//go:build !unix

package store

import (
	"errors"
	"os"
	"time"

	"github.com/hostlease/hostlease/internal/trustfs"
)

var errLockWait = errors.New("lock wait timed out")

// waitLockOpen leaves locking to bbolt where flock(2) does not exist.
func waitLockOpen(bool, time.Duration, *trustfs.Dir) func(string, int, os.FileMode) (*os.File, error) {
	return nil
}

// unlockFile is never reached here: waitLockOpen opens no file itself.
func unlockFile(*os.File) error { return errors.ErrUnsupported }
