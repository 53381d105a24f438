package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// One writer per store file, and every opener proves it holds the file at
// the path. The contract, which every process that opens or replaces a store
// keeps (the plugin, the daemon, the CLI: all through this file):
//
//   - An opener opens the path without following a symlink, takes the file's
//     flock (exclusive to write, shared to read) and only then compares the
//     locked file's device and inode (fstat) with the path's (lstat). On a
//     mismatch the file was replaced while the opener waited: it closes it
//     and starts again with the file now at the path. Only a file proven at
//     the path is read or written.
//   - A replacer (a rebuild, a set-aside, a migration) holds the exclusive
//     flock of the file it replaces, proven as above, from before its first
//     read of it until after its rename over the path. A writer that then
//     gets the lock of the old file sees the mismatch and moves on to the
//     new one: nothing is written into a file no longer at the path, and
//     nothing written before the read is missed.
//   - A store is linked or renamed into place only once complete (every
//     bucket, the schema, the records count), built in a trustfs.Temp (a
//     random name created exclusively in the same directory, fsynced); the
//     directory is fsynced after.
//   - "The path" is the store's name in its data dir as checked and opened
//     by trustfs (openDataDir): once the directory is open, every lstat,
//     link, rename and unlink is relative to its descriptor. A data dir
//     swapped for a link after the check is never entered: the store stays
//     in the directory checked.

// ErrReplaced means the file at a store's path changed while a LockedFile
// held the file it had proven there: a process outside the contract (an
// operator's mv or cp) replaced it. Nothing was written.
var ErrReplaced = errors.New("the store file was replaced under its lock")

// LockOptions says how LockFile locks a store file.
type LockOptions struct {
	// Exclusive takes the write lock (LOCK_EX); otherwise the shared one.
	Exclusive bool
	// Timeout bounds the whole wait, retries included (default 10s).
	Timeout time.Duration
	// By names who acts, as OpenOptions.By (the stores Store and Replace
	// open).
	By string
}

// LockedFile is a store file opened without following a symlink, flocked,
// and proven to be the file at its path once the lock was had (see the
// contract above). With an exclusive lock nobody else writes the store until
// Close; Replace swaps a new store in under that lock.
type LockedFile struct {
	f    *os.File
	info os.FileInfo // f's fstat, taken with the lock held
	path string
	// dir is the checked data dir the file was opened and proven in; every
	// later act (SetAside, Replace) is relative to it. ownDir: Close closes
	// it (LockFile's; Open's lockAt borrows Open's).
	dir    *trustfs.Dir
	ownDir bool
	excl   bool
	// db and view are the bbolt view Store opened on f (nil until then);
	// viewErr is why the view was refused, once opened.
	db      *bolt.DB
	view    *Store
	viewErr error
	by      string
}

// LockFile opens the file at path (read-only, never through a symlink: a
// symlink is ELOOP), takes its flock and proves it is the file at path: the
// device and inode of the locked descriptor (fstat) and of the path (lstat)
// are equal. On a mismatch it closes the file, which releases the lock, and
// tries again with the file now at path, until o.Timeout has passed in all
// (then ErrLockTimeout). A path that does not exist, or no longer does, is an
// error wrapping os.ErrNotExist. The file's content is not looked at: a
// damaged file bbolt cannot open is locked all the same.
func LockFile(path string, o LockOptions) (*LockedFile, error) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dir, err := openDataDir(path, false)
	if err != nil {
		return nil, err
	}
	l, err := lockAt(dir, path, os.O_RDONLY, o.Exclusive, time.Now().Add(timeout))
	if err == nil {
		l.ownDir = true
		l.by = o.By
		return l, nil
	}
	dir.Close()
	if errors.Is(err, errLockWait) {
		return nil, fmt.Errorf("%w (%s) on %s", ErrLockTimeout, timeout, path)
	}
	if trustfs.IsUntrusted(err) {
		return nil, err
	}
	return nil, &IOError{Op: "lock", Path: path, Err: unwrapPath(err)}
}

// lockAt is LockFile's loop: open path with flag (relative to its checked
// data dir, by trustfs's contract), flock, prove, retry on a mismatch until
// deadline. Open's bbolt hook calls it too.
func lockAt(dir *trustfs.Dir, path string, flag int, exclusive bool, deadline time.Time) (*LockedFile, error) {
	// Never create here: a store comes into being complete (create), and a
	// path that vanished is reported as missing.
	flag &^= os.O_CREATE | os.O_TRUNC | os.O_EXCL
	for {
		f, err := openBlocking(dir, path, flag)
		if err != nil {
			return nil, err
		}
		if err := flockWait(f, exclusive, deadline); err != nil {
			if !errors.Is(err, errLockWait) {
				f.Close()
			}
			return nil, err
		}
		info, same, err := atPath(dir, f, path)
		if err != nil {
			f.Close()
			return nil, err
		}
		if same {
			return &LockedFile{f: f, info: info, path: path, dir: dir, excl: exclusive}, nil
		}
		f.Close() // replaced while we waited: the lock of a file no longer at path proves nothing
		if !time.Now().Before(deadline) {
			return nil, errLockWait
		}
	}
}

// atPath reports whether f is the file at path's name in dir (fstatat, not
// following a symlink), and f's fstat. A name that no longer exists is an
// error wrapping os.ErrNotExist.
func atPath(dir *trustfs.Dir, f *os.File, path string) (os.FileInfo, bool, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	cur, err := dir.Lstat(filepath.Base(path))
	if err != nil {
		return nil, false, err
	}
	return info, trustfs.SameFile(&cur, info), nil
}

// Path is the path the file was proven at.
func (l *LockedFile) Path() string { return l.path }

// Info is the locked file's fstat, taken once the lock was had.
func (l *LockedFile) Info() os.FileInfo { return l.info }

// Store opens the locked file as a store for reading (View), without a lock
// of its own: the view and the lock last until l.Close; the Store's Close
// does nothing and its Update refuses. It checks what a read-only Open checks
// (length, schema, buckets) and writes nothing, also to a damaged file. An
// error classes the file as Open would (ErrUnreadable for damage); l still
// holds the lock then.
func (l *LockedFile) Store() (s *Store, err error) {
	if l.view != nil || l.viewErr != nil {
		return l.view, l.viewErr
	}
	if l.info.Size() == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrUnreadable, l.path)
	}
	// bbolt takes the flock of the file it opens and drops it when it
	// closes. It gets a second descriptor of l's open file description: its
	// flock (exclusive: LOCK_EX on a description that holds it changes
	// nothing; shared, as l's) is l's own lock. Read-write, because a
	// read-only bbolt converts the lock to shared; with NoFreelistSync and
	// no write transaction it writes nothing.
	var dup *os.File
	openFile := func(string, int, os.FileMode) (*os.File, error) {
		var err error
		dup, err = dupFile(l.f)
		return dup, err
	}
	db, err := func() (db *bolt.DB, err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				db, err = nil, fmt.Errorf("%w: %s: %v", ErrUnreadable, l.path, r)
			}
		}()
		return bolt.Open(l.path, 0o600, &bolt.Options{ReadOnly: !l.excl, NoFreelistSync: true, Timeout: time.Second, OpenFile: openFile})
	}()
	if err != nil {
		if dup != nil {
			dup.Close()
		}
		// A failed bbolt open unlocked the description it closed (l's):
		// take the lock again and prove the file is still at the path.
		if rerr := l.relock(); rerr != nil {
			return nil, rerr
		}
		if errors.Is(err, ErrUnreadable) {
			return nil, err
		}
		return nil, classifyOpenError(l.path, "open", err)
	}
	l.db = db
	s = &Store{db: db, path: l.path, file: dup, lockedFileView: true, by: l.by}
	if err := s.checkReadable(); err != nil {
		l.viewErr = err
		return nil, err
	}
	l.view = s
	return s, nil
}

// relock takes l's flock again after bbolt dropped it, and proves the file
// is still the one at the path (ErrReplaced otherwise).
func (l *LockedFile) relock() error {
	if err := flockWait(l.f, l.excl, time.Now().Add(10*time.Second)); err != nil {
		if errors.Is(err, errLockWait) {
			l.f = nil // flockWait closes it when it gets the lock
			return fmt.Errorf("%w on %s", ErrLockTimeout, l.path)
		}
		return &IOError{Op: "lock", Path: l.path, Err: err}
	}
	if _, same, err := atPath(l.dir, l.f, l.path); err != nil || !same {
		return fmt.Errorf("%w: %s", ErrReplaced, l.path)
	}
	return nil
}

// SetAside hard-links the locked file to the first free name of name(0),
// name(1), ... (at most 1000 tries), each a path in the store's directory:
// linkat(2) relative to the checked data dir never follows and never
// replaces an existing name (or a symlink) there. It checks the new name is
// the locked file, fsyncs the directory and returns it.
func (l *LockedFile) SetAside(name func(n int) string) (string, error) {
	if err := l.proven(); err != nil {
		return "", err
	}
	for n := 0; ; n++ {
		aside := name(n)
		if filepath.Dir(aside) != filepath.Dir(l.path) {
			return "", fmt.Errorf("set-aside name %s is not in the directory of %s", aside, l.path)
		}
		err := l.dir.Link(filepath.Base(l.path), filepath.Base(aside))
		if err == nil {
			if !l.isLocked(aside) {
				return "", fmt.Errorf("%w: %s (its set-aside link %s is another file)", ErrReplaced, l.path, aside)
			}
			return aside, l.dir.Sync()
		}
		if !errors.Is(err, os.ErrExist) || n >= 1000 {
			return "", &IOError{Op: "set aside as " + aside, Path: l.path, Err: unwrapPath(err)}
		}
	}
}

// isLocked reports whether the name of path in the data dir is the locked
// file.
func (l *LockedFile) isLocked(path string) bool {
	st, err := l.dir.Lstat(filepath.Base(path))
	return err == nil && trustfs.SameFile(&st, l.info)
}

// RemoveAside removes aside, a name SetAside returned, relative to the
// checked data dir, when it still is a name of the locked file (a Replace
// that failed leaves the store at the path: the set-aside is a second name of
// it). Anything else there is left alone.
func (l *LockedFile) RemoveAside(aside string) error {
	if filepath.Dir(aside) != filepath.Dir(l.path) || !l.isLocked(aside) {
		return fmt.Errorf("%s is not a set-aside name of %s", aside, l.path)
	}
	return l.dir.Remove(filepath.Base(aside))
}

// Replace puts a new store, filled by fill, at l's path in place of the
// locked file, which l must hold exclusively: the new store is built complete
// in a trustfs.Temp of the checked data dir (create's temporary name: random,
// created exclusively), fill's transaction is committed (and so fsynced),
// then it is renamed over the path (renameat relative to the data dir) while
// l still holds the old file's lock, and the directory is fsynced. A writer
// waiting for the old file's lock then finds it is no longer the file at the
// path and opens the new one. On an error the old file stays at the path.
func (l *LockedFile) Replace(fill func(*Tx) error) error {
	if !l.excl {
		return fmt.Errorf("replacing %s needs its exclusive lock", l.path)
	}
	if err := l.proven(); err != nil {
		return err
	}
	st, tmp, err := createTemp(l.dir, l.path)
	if err != nil {
		return err
	}
	defer tmp.Abort()
	st.by = l.by
	st.path = l.path // errors name the store
	err = st.Update(fill)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := l.proven(); err != nil {
		return err
	}
	if err := tmp.Rename(filepath.Base(l.path)); err != nil {
		return &IOError{Op: "replace", Path: l.path, Err: unwrapPath(err)}
	}
	return nil
}

// proven checks l's file is still the one at its path (ErrReplaced).
func (l *LockedFile) proven() error {
	if l.f == nil {
		return fmt.Errorf("%w on %s", ErrLockTimeout, l.path)
	}
	if _, same, err := atPath(l.dir, l.f, l.path); err != nil || !same {
		return fmt.Errorf("%w: %s", ErrReplaced, l.path)
	}
	checked()
	return nil
}

// Close ends the view Store opened and releases the lock.
func (l *LockedFile) Close() error {
	var err error
	if l.db != nil {
		err = l.db.Close()
		l.db, l.view, l.viewErr = nil, nil, nil
	}
	if l.f != nil {
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
		l.f = nil
	}
	if l.ownDir {
		l.dir.Close()
		l.dir, l.ownDir = nil, false
	}
	return err
}

// errNotLocked is Store.Update on a view opened by LockedFile.Store.
var errNotLocked = errors.New("a view of a locked store file (LockedFile.Store) is read-only")
