package store

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// ErrUntrusted is matched by a store file or data dir refused by trustfs's
// contract (a symlink, a file or directory not owned by this process's user
// or root, or writable by group or others): an environment error
// (IsEnvironmentError), never damage. The error names the path, its owner
// and mode, and the fix.
var ErrUntrusted = trustfs.ErrUntrusted

// openDataDir opens the directory holding the store at path by trustfs's
// contract (its last component never a symlink; owned by this process's user
// or root; not writable by group or others), creating it (and its parents,
// 0755) when missing and create is set. The store file is then opened
// relative to it (openBlocking), so a data dir swapped for a link after this
// check is never entered. A missing directory without create is an
// *IOError for path wrapping ENOENT, as a missing store is.
func openDataDir(path string, create bool) (*trustfs.Dir, error) {
	dir := filepath.Dir(path)
	d, err := trustfs.OpenDir(dir)
	if create && errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, &IOError{Op: "create directory", Path: filepath.Dir(dir), Err: unwrapPath(err)}
		}
		d, err = trustfs.MkdirOpen(dir, 0o755)
	}
	switch {
	case err == nil:
		checked()
		return d, nil
	case trustfs.IsUntrusted(err):
		return nil, err
	case errors.Is(err, os.ErrNotExist):
		return nil, &IOError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	// Named by the store's path, as every store error is ("open data dir
	// of /var/lib/cni/hostlease/net.db: too many open files (EMFILE)").
	return nil, &IOError{Op: "open data dir of", Path: path, Err: unwrapPath(err)}
}

// CheckTrusted checks the store at path and its data dir by trustfs's
// contract without opening the store: nil when both may be used (a missing
// store file is not checked), else an error naming what is refused and why
// (ErrUntrusted), or the environment error met. Whatever replaces a store
// file calls it first.
func CheckTrusted(path string) error {
	d, err := openDataDir(path, false)
	if err != nil {
		return err
	}
	defer d.Close()
	f, err := d.OpenFile(filepath.Base(path), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return classifyOpenError(path, "open", err)
	}
	return f.Close()
}

// checkedHook, when set (by tests only), is called after every check that
// an act in a data dir relies on (the data dir opened, a locked file proven at
// its path) and before that act: a test swaps the directory there.
var checkedHook func()

func checked() {
	if checkedHook != nil {
		checkedHook()
	}
}
