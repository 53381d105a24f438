//go:build !unix

package store

import (
	"errors"
	"os"
	"time"

	"github.com/hostlease/hostlease/internal/trustfs"
)

var errLockWait = errors.New("lock wait timed out")

// flockWait: flock(2) does not exist here.
func flockWait(*os.File, bool, time.Time) error { return errors.ErrUnsupported }

func unlockFile(*os.File) error { return errors.ErrUnsupported }

func openBlocking(dir *trustfs.Dir, name string, flag int) (*os.File, error) {
	return os.OpenFile(name, flag, 0)
}

func dupFile(*os.File) (*os.File, error) { return nil, errors.ErrUnsupported }

// lockSupported: Open leaves locking to bbolt.
const lockSupported = false
