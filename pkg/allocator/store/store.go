package store

import (
	bolt "go.etcd.io/bbolt"

	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// ErrLockTimeout means another process held the store lock for the whole timeout.
var ErrLockTimeout = errors.New("timed out waiting for the store lock")

// Store is an open allocation store. Callers open it, run one transaction and
// close it: the bbolt file lock serialises plugin processes, so nothing may keep
// a store open longer than one operation.
type Store struct {
	db   *bolt.DB
	path string
	// file is the file bbolt opened and locked (nil where Open leaves opening
	// to bbolt).
	file *os.File
	// lockedFileView: a read view of a LockedFile, which owns the lock (Store).
	lockedFileView bool
	// by is who acts through this store (OpenOptions.By).
	by string
}

// nameMax is the longest file name Linux filesystems take (NAME_MAX).
const nameMax = 255

// FilePath is where the store of a network lives under dir: <network>.db.
// A network name may be as long as a file name (host-local keeps its state in
// a directory named after it), which leaves no room for ".db": a name whose
// "<network>.db" would exceed NAME_MAX is stored as its first 200 bytes, "-",
// 16 hex digits of its 64-bit FNV-1a hash and ".db" (220 bytes). The mapping is
// deterministic, so every process finds the same file; the full name is in
// the store's meta (Tx.Network).
func FilePath(dir, network string) string { return filepath.Join(dir, storeFileName(network)) }

func storeFileName(network string) string {
	if len(network)+len(".db") <= nameMax {
		return network + ".db"
	}
	h := fnv.New64a()
	h.Write([]byte(network))
	return fmt.Sprintf("%s-%016x.db", network[:200], h.Sum64())
}

// OpenOptions says how to open a store.
type OpenOptions struct {
	LockTimeout time.Duration
	ReadOnly    bool
	// Create makes the directory and the file when missing. Without it a missing
	// store is reported as os.ErrNotExist.
	Create bool
	// By names who acts (allocator.ByPlugin, allocator.ByDaemon,
	// allocator.ByCLI(verb)): the audit entries the store writes on its own
	// (index repairs) name it. Empty is "hostlease".
	By string
}

// Open opens the store at path. A file that exists but is empty, truncated or
// otherwise undecodable yields an error wrapping ErrUnreadable; a store of
// another schema a *SchemaError (ErrSchema); in both cases the file is
// left untouched (it is evidence, or another version's). A failure of the system (read-only file
// system, no space, too many open files, permissions) is a *IOError
// (ErrIO). path is never followed if it is a symlink: a symlink there,
// dangling or not, is an error naming it (ELOOP), and nothing is created at
// its target. The store file and its data dir are used only when trustfs's
// contract holds (owned by this process's user or root, not writable by group
// or others, the data dir not a symlink): else the error matches ErrUntrusted
// (an environment error) and names the path, owner, mode and fix; the file
// is opened relative to the checked data dir and checked (fstat) before its
// lock is waited for.
//
// Open keeps the contract of lockfile.go: once it holds the file's lock
// (exclusive read-write, shared read-only) it proves the file is still the
// one at path, and starts again with the file now there when it is not (a
// rebuild renamed a new store over it while Open waited). A path that
// vanished meanwhile is as if it had been missing. The lock timeout bounds
// the whole, retries included.
func Open(path string, o OpenOptions) (*Store, error) {
	timeout := o.LockTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		s, err := open(path, o, timeout, deadline)
		if !errors.Is(err, errVanished) {
			return s, err
		}
		if !time.Now().Before(deadline) {
			return nil, &IOError{Op: "open", Path: path, Err: os.ErrNotExist}
		}
	}
}

// errVanished is open's: the file at path went away between its lstat and
// its lock.
var errVanished = errors.New("store file vanished")

// open is one try of Open.
func open(path string, o OpenOptions, timeout time.Duration, deadline time.Time) (s *Store, err error) {
	dir, err := openDataDir(path, o.Create)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	fi, statErr := dir.Info(filepath.Base(path))
	switch {
	case statErr == nil && fi.Mode()&os.ModeSymlink != 0:
		target, _ := dir.Readlink(filepath.Base(path))
		return nil, trustfs.SymlinkError(path, "file", target)
	case statErr == nil && !fi.Mode().IsRegular():
		return nil, &IOError{Op: "open", Path: path, Err: fmt.Errorf("is not a regular file (%s)", fi.Mode().Type())}
	case statErr == nil && fi.Size() == 0:
		// bbolt would silently initialise an empty file: that would forget every
		// allocation lost with it. Treat it as unreadable instead.
		return nil, fmt.Errorf("%w: %s is empty", ErrUnreadable, path)
	case errors.Is(statErr, os.ErrNotExist) && !o.Create:
		return nil, &IOError{Op: "open", Path: path, Err: unwrapPath(statErr)}
	case errors.Is(statErr, os.ErrNotExist):
		if err := create(dir, path); err != nil {
			return nil, err
		}
	case statErr != nil:
		return nil, &IOError{Op: "stat", Path: path, Err: unwrapPath(statErr)}
	}
	var locked *LockedFile
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		// bbolt panics on some corruptions it meets while reading pages.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %s: %v", ErrUnreadable, path, r)
			if locked != nil {
				locked.f.Close() // bbolt did not: a daemon must not keep the lock
			}
		}
	}()
	// bbolt opens the file through lockAt: open, flock with a kernel wait,
	// prove the file is at path. Holding the lock on the very file bbolt
	// uses makes bbolt's own flock succeed at once.
	var lockErr error
	openFile := func(name string, flag int, _ os.FileMode) (*os.File, error) {
		locked, lockErr = lockAt(dir, name, flag, !o.ReadOnly, deadline)
		if lockErr != nil {
			return nil, lockErr
		}
		return locked.f, nil
	}
	if !lockSupported {
		openFile = nil // bbolt's own flock, without the proof
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: o.ReadOnly, OpenFile: openFile})
	switch {
	case errors.Is(lockErr, os.ErrNotExist):
		return nil, errVanished
	case err != nil && (errors.Is(err, bolt.ErrTimeout) || errors.Is(err, errLockWait)):
		return nil, fmt.Errorf("%w (%s) on %s", ErrLockTimeout, timeout, path)
	case err != nil:
		return nil, classifyOpenError(path, "open", err)
	}
	s = &Store{db: db, path: path, by: o.By}
	if locked != nil {
		s.file = locked.f
	}
	if !o.ReadOnly {
		if err := s.init(); err != nil {
			db.Close()
			return nil, err
		}
	} else if err := s.checkReadable(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close releases the file lock (a view opened by LockedFile.Store: nothing;
// LockedFile.Close ends it).
func (s *Store) Close() error {
	if s.lockedFileView {
		return nil
	}
	return s.db.Close()
}

// UnlockForExit releases the file lock of a process that is about to exit,
// leaving the file mapped: the kernel tears the mapping down at exit, which
// costs less than munmap while the Go runtime's other threads may hold it in
// their TLBs (each munmap then interrupts every CPU they ran on; figures in
// docs/benchmarks.md). The plugin calls it right after its one transaction
// committed, so that concurrent calls waiting for the lock start at once.
// The Store must not be used after.
func (s *Store) UnlockForExit() error {
	if s.lockedFileView {
		return nil
	}
	if s.file == nil { // Open left opening (and locking) to bbolt
		return s.Close()
	}
	return unlockFile(s.file)
}

// Update runs fn in one durable read-write transaction: all of fn's writes
// land together (fsynced) or none do. A transaction in which fn wrote nothing
// is rolled back instead of committed: a commit costs two fdatasyncs even when
// empty (docs/benchmarks.md), and a repeated
// DEL (runtimes retry teardown) or a commit marker finding its records
// already committed change nothing.
//
// A panic of bbolt on a page it reads (or a fault on the mapping) is returned
// as ErrPageDamaged; a failure to write or sync as a *IOError.
func (s *Store) Update(fn func(*Tx) error) (err error) {
	if s.lockedFileView {
		return errNotLocked
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverDamaged(&err, s.path)
	btx, err := s.db.Begin(true)
	if err != nil {
		return classifyTxError(s.path, err)
	}
	finished := false
	defer func() {
		if !finished {
			_ = btx.Rollback() // fn panicked
		}
	}()
	tx := wrapTx(btx, s.by)
	if tx.allocs != nil {
		// Addresses are handed out in ascending (round-robin) order, so
		// allocs mostly grows at its end. bbolt's default split point (50%)
		// would leave every leaf half empty for good; at 90% an ADD that
		// steps over taken addresses to find a free one reads about half
		// as many pages, and the file is smaller (docs/benchmarks.md).
		tx.allocs.FillPercent = 0.9
	}
	err = fn(tx)
	finished = true
	switch {
	case err != nil:
		_ = btx.Rollback()
		return structureDamage(s.path, err)
	case !wroteAnything(btx):
		return btx.Rollback()
	}
	return classifyTxError(s.path, btx.Commit())
}

// wroteAnything reports whether a transaction changed anything. bbolt changes
// a page only through the in-memory node it makes of it (puts, deletes,
// bucket creation, sequences all materialise one), so a transaction that made
// no node wrote nothing.
func wroteAnything(btx *bolt.Tx) bool {
	st := btx.Stats()
	return st.GetNodeCount() > 0
}

// View runs fn in a read-only transaction.
// A panic of bbolt on a page it reads is returned as ErrPageDamaged.
func (s *Store) View(fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverDamaged(&err, s.path)
	return structureDamage(s.path, s.db.View(func(btx *bolt.Tx) error { return fn(wrapTx(btx, s.by)) }))
}

// recoverCorrupt turns a panic from a corrupt page into ErrUnreadable.
// Callers also set debug.SetPanicOnFault so that touching a page beyond the end of a
// truncated, mmapped file (SIGBUS) is a recoverable panic, not a crash.
func recoverCorrupt(err *error, path string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %v", ErrUnreadable, path, r)
	}
}

// recoverDamaged turns a panic met by a transaction of an open store into
// ErrPageDamaged (see errors.go for why this is not ErrUnreadable).
func recoverDamaged(err *error, path string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: a page could not be read: %v", ErrPageDamaged, path, r)
	}
}

func wrapTx(btx *bolt.Tx, by string) *Tx {
	tx := &Tx{
		by:         by,
		btx:        btx,
		meta:       btx.Bucket(bucketMeta),
		allocs:     btx.Bucket(bucketAllocs),
		taken:      btx.Bucket(bucketTaken),
		owners:     btx.Bucket(bucketOwners),
		exhaustion: btx.Bucket(bucketExhaustion),
		audit:      btx.Bucket(bucketAudit),
		imported:   btx.Bucket(bucketImported),
		pods:       btx.Bucket(bucketPods),
		auditq:     btx.Bucket(bucketAuditQueue),
		poddrop:    btx.Bucket(bucketPodDrops),
	}
	tx.takenIdx = takenBits{tx.taken}
	if tx.taken == nil {
		tx.takenIdx = recordKeys{tx.allocs}
	}
	return tx
}
