package allocator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket layout of a store (one bbolt file per network):
//
//	meta        schema version, network name, range sets, last reserved per range set
//	allocs      addrKey(ip) -> Record                  (the source of truth; codec.go)
//	takenbits   block key -> bitmap of reserved addresses (what the address choice reads; bitmap.go)
//	ownerhash   ownerPrefix(containerID, ifname) + addrKey -> nil  (index for ADD/DEL/CHECK)
//	exhaustion  range set index -> JSON Exhaustion
//	audit       big-endian sequence -> AuditEvent (bounded to auditLimit; codec.go)
//	imported    addrKey(ip) -> nil for each record imported from host-local
//	            and still held (see ReleaseVanishedHostLocal)
//
// meta also keeps "records", the number of records in allocs (8 bytes, big
// endian), written in the same transaction as every record put or deleted: it
// is the count the derived indexes are checked against (see indexesAgree).
var (
	bucketMeta       = []byte("meta")
	bucketAllocs     = []byte("allocs")
	bucketTaken      = []byte("takenbits")
	bucketOwners     = []byte("ownerhash")
	bucketExhaustion = []byte("exhaustion")
	bucketAudit      = []byte("audit")
	bucketImported   = []byte("imported")

	keySchema  = []byte("schema")
	keyNetwork = []byte("network")
	keyRanges  = []byte("ranges")
	keyRecords = []byte("records")
)

// auditLimit bounds the audit log so a store never grows without bound; the
// oldest entries are dropped auditPrune at a time (see Tx.Audit).
const (
	auditLimit = 2048
	auditPrune = 64
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
}

// nameMax is the longest file name Linux filesystems take (NAME_MAX).
const nameMax = 255

// StorePath is where the store of a network lives under dir: <network>.db.
// A network name may be as long as a file name (host-local keeps its state in
// a directory named after it), which leaves no room for ".db": a name whose
// "<network>.db" would exceed NAME_MAX is stored as its first 200 bytes, "-",
// 16 hex digits of its 64-bit FNV-1a hash and ".db" (220 bytes). The mapping is
// deterministic, so every process finds the same file; the full name is in
// the store's meta (Tx.Network).
func StorePath(dir, network string) string { return filepath.Join(dir, storeFileName(network)) }

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
}

// Open opens the store at path. A file that exists but is empty, truncated or
// otherwise undecodable yields an error wrapping ErrStoreUnreadable; a store of
// another schema a *SchemaError (ErrStoreSchema); in both cases the file is
// left untouched (it is evidence, or another version's). A failure of the system (read-only file
// system, no space, too many open files, permissions) is a *StoreIOError
// (ErrStoreIO). path is never followed if it is a symlink: a symlink there,
// dangling or not, is an error naming it (ELOOP), and nothing is created at
// its target.
func Open(path string, o OpenOptions) (s *Store, err error) {
	fi, statErr := os.Lstat(path)
	switch {
	case statErr == nil && fi.Mode()&os.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return nil, &StoreIOError{Op: "open", Path: path,
			Err: fmt.Errorf("is a symlink to %q; hostlease never opens its store through a symlink: %w", target, syscall.ELOOP)}
	case statErr == nil && !fi.Mode().IsRegular():
		return nil, &StoreIOError{Op: "open", Path: path, Err: fmt.Errorf("is not a regular file (%s)", fi.Mode().Type())}
	case statErr == nil && fi.Size() == 0:
		// bbolt would silently initialise an empty file: that would forget every
		// allocation lost with it. Treat it as unreadable instead.
		return nil, fmt.Errorf("%w: %s is empty", ErrStoreUnreadable, path)
	case errors.Is(statErr, os.ErrNotExist) && !o.Create:
		return nil, &StoreIOError{Op: "open", Path: path, Err: unwrapPath(statErr)}
	case errors.Is(statErr, os.ErrNotExist):
		if err := create(path); err != nil {
			return nil, err
		}
	case statErr != nil:
		return nil, &StoreIOError{Op: "stat", Path: path, Err: unwrapPath(statErr)}
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		// bbolt panics on some corruptions it meets while reading pages.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %s: %v", ErrStoreUnreadable, path, r)
		}
	}()
	timeout := o.LockTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var file *os.File
	openFile := waitLockOpen(!o.ReadOnly, timeout)
	if openFile != nil {
		wait := openFile
		openFile = func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := wait(name, flag, mode)
			file = f
			return f, err
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: o.ReadOnly, OpenFile: openFile})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) || errors.Is(err, errLockWait) {
			return nil, fmt.Errorf("%w (%s) on %s", ErrLockTimeout, timeout, path)
		}
		return nil, classifyOpenError(path, "open", err)
	}
	s = &Store{db: db, path: path, file: file}
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

// tempPrefix is the name prefix of the private file create builds a store
// in: ".new-", 16 hex digits of a hash of the store's file name, "-". It fits
// NAME_MAX whatever the network name (os.CreateTemp appends up to 10 digits).
func tempPrefix(storeFile string) string {
	h := fnv.New64a()
	h.Write([]byte(storeFile))
	return fmt.Sprintf(".new-%016x-", h.Sum64())
}

// StaleTempAge is how old a temporary store file must be before
// CleanStaleTemp removes it. create keeps one for a few milliseconds; one
// older than this was left by a process killed during a network's first use.
// Removing one is safe at any age (it holds no allocation: a live creator
// would at worst fail its call once, to be retried), the age only spares the
// creator that failure.
const StaleTempAge = time.Minute

// CleanStaleTemp removes the temporary files that create left in dir when
// its process was killed (".new-<hash>-*", and the ".<network>.db.new-*" names
// of earlier versions) once they are older than minAge, and returns their
// paths. The plugin calls it on a network's first use; the daemon may call it
// every sweep. A missing dir is not an error.
func CleanStaleTemp(dir string, minAge time.Duration, now time.Time) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &StoreIOError{Op: "read directory", Path: dir, Err: unwrapPath(err)}
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if !isTempName(name) || e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < minAge {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		}
	}
	return removed, nil
}

// isTempName reports whether name is one of create's temporary file names.
func isTempName(name string) bool {
	if strings.HasPrefix(name, ".new-") && len(name) > len(".new-")+17 {
		return true
	}
	// Earlier versions: "." + <network>.db + ".new-" + digits.
	before, after, ok := strings.Cut(name, ".db.new-")
	return ok && strings.HasPrefix(before, ".") && len(before) > 1 && after != "" && strings.Trim(after, "0123456789") == ""
}

// create makes an initialised store file at path without path ever existing
// empty. bbolt creates a file and only then locks and initialises it, so a
// concurrent first use of the network would see an empty file, which Open must
// treat as lost state. The file is built under a private name and hard-linked
// into place; if another process got there first, its store is kept. Stale
// private files of killed creators are removed first (CleanStaleTemp).
func create(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &StoreIOError{Op: "create directory", Path: dir, Err: unwrapPath(err)}
	}
	_, _ = CleanStaleTemp(dir, StaleTempAge, time.Now())
	f, err := os.CreateTemp(dir, tempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return &StoreIOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	// Errors name the store: the temporary file is removed on return.
	if err := f.Close(); err != nil {
		return &StoreIOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	db, err := bolt.Open(tmp, 0o600, nil) // an empty file: bbolt initialises it
	if err != nil {
		return classifyOpenError(path, "create", err)
	}
	if err := db.Close(); err != nil {
		return classifyOpenError(path, "create", err)
	}
	// link(2) never follows its new path: a symlink there (dangling or not)
	// is EEXIST, and the Open that follows refuses it.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return &StoreIOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	return nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close releases the file lock.
func (s *Store) Close() error { return s.db.Close() }

// UnlockForExit releases the file lock of a process that is about to exit,
// leaving the file mapped: the kernel tears the mapping down at exit, which
// costs less than munmap while the Go runtime's other threads may hold it in
// their TLBs (each munmap then interrupts every CPU they ran on). The plugin
// calls it right after its one transaction committed, so that concurrent
// calls waiting for the lock start at once. The Store must not be used after.
func (s *Store) UnlockForExit() error {
	if s.file == nil { // Open left opening (and locking) to bbolt
		return s.Close()
	}
	return unlockFile(s.file)
}

func (s *Store) init() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err, s.path)
	defer func() { err = classifyTxError(s.path, err) }()
	// Every plugin call opens the store read-write, and the store is
	// initialised on all but the first: then a read-only look is enough, and
	// spares each call a write transaction (a commit: two fdatasyncs).
	ready := false
	if err := s.db.View(func(btx *bolt.Tx) error {
		if err := checkLength(btx, s.file, s.path); err != nil {
			return err
		}
		if err := checkSchema(btx, s.path); err != nil || btx.Bucket(bucketAllocs) == nil {
			return err // refused, or a new file: initialise it
		}
		for _, b := range derivedBuckets {
			if btx.Bucket(b) == nil {
				return nil
			}
		}
		ready = len(btx.Bucket(bucketMeta).Get(keyRecords)) == 8
		return nil
	}); err != nil || ready {
		return err
	}
	return s.initialise()
}

// derivedBuckets are the buckets a store of this schema has besides meta and
// allocs. The indexes among them are derived from the records: initialise
// rebuilds one that is missing (damage) instead of refusing the store.
var derivedBuckets = [][]byte{bucketTaken, bucketOwners, bucketExhaustion, bucketAudit, bucketImported}

// checkSchema refuses a store whose meta names another schema than
// SchemaVersion (*SchemaError, ErrStoreSchema: another version's store, not
// damage). A schema value no version ever wrote (none, 0, more than one
// byte), or a meta or allocs bucket gone while the other remains, is damage
// (ErrStoreUnreadable: recreating the records would hand every address in
// use out again). A file with neither bucket is new.
func checkSchema(btx *bolt.Tx, path string) error {
	meta, allocs := btx.Bucket(bucketMeta), btx.Bucket(bucketAllocs)
	switch {
	case meta == nil && allocs == nil:
		return nil
	case meta == nil:
		return fmt.Errorf("%w: %s lacks its meta bucket", ErrStoreUnreadable, path)
	case allocs == nil:
		return fmt.Errorf("%w: %s lacks its allocs bucket", ErrStoreUnreadable, path)
	}
	switch v := meta.Get(keySchema); {
	case len(v) != 1 || v[0] == 0:
		return fmt.Errorf("%w: %s: meta schema value %x is no schema", ErrStoreUnreadable, path, v)
	case int(v[0]) != SchemaVersion:
		return &SchemaError{Path: path, Found: int(v[0])}
	}
	return nil
}

// initialise makes a new file a store of this schema, or restores the
// derived buckets and the records count of a store that lost them (damage:
// the indexes are rebuilt from the records). A page it then fails to read is
// page damage, as in any later transaction: the daemon's open reads no more
// than init's first look, so it must not be told to rebuild.
func (s *Store) initialise() (err error) {
	defer recoverDamaged(&err, s.path)
	return s.db.Update(func(btx *bolt.Tx) error {
		if err := checkSchema(btx, s.path); err != nil {
			return err
		}
		fresh := btx.Bucket(bucketAllocs) == nil
		restoreTaken := !fresh && btx.Bucket(bucketTaken) == nil
		restoreOwners := !fresh && btx.Bucket(bucketOwners) == nil
		restoreImported := !fresh && btx.Bucket(bucketImported) == nil
		for _, b := range append([][]byte{bucketMeta, bucketAllocs}, derivedBuckets...) {
			if btx.Bucket(b) == nil {
				if _, err := btx.CreateBucket(b); err != nil {
					return err
				}
			}
		}
		meta, allocs := btx.Bucket(bucketMeta), btx.Bucket(bucketAllocs)
		if fresh {
			if err := meta.Put(keySchema, []byte{SchemaVersion}); err != nil {
				return err
			}
		}
		if restoreTaken {
			taken := takenBits{btx.Bucket(bucketTaken)}
			if err := allocs.ForEach(func(k, _ []byte) error {
				if ip, ok := keyAddr(k); ok {
					return taken.set(ip, true)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if restoreOwners {
			// Every record that decodes (one that does not is left to
			// RepairIndexes, which files it under its readable owner).
			owners := btx.Bucket(bucketOwners)
			if err := allocs.ForEach(func(k, v []byte) error {
				if r, err := decodeAt(k, v); err == nil {
					return owners.Put(append(ownerPrefix(r.ContainerID, r.IfName), k...), nil)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if restoreImported {
			// The host-local records are those whose source says so.
			imported := btx.Bucket(bucketImported)
			if err := allocs.ForEach(func(k, v []byte) error {
				if r, err := decodeAt(k, v); err == nil && r.Source == SourceHostLocal {
					return imported.Put(k, nil)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if len(meta.Get(keyRecords)) != 8 {
			if err := meta.Put(keyRecords, binary.BigEndian.AppendUint64(nil, uint64(allocs.Stats().KeyN))); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkReadable is a read-only open's look: the length and the schema. A
// read-only view of a store that lost a derived index reads the records
// instead (see wrapTx); the next read-write open restores the index.
func (s *Store) checkReadable() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err, s.path)
	return s.db.View(func(btx *bolt.Tx) error {
		// First the length: the bucket lookups below read pages that a
		// truncated file no longer has.
		if err := checkLength(btx, s.file, s.path); err != nil {
			return err
		}
		if btx.Bucket(bucketMeta) == nil || btx.Bucket(bucketAllocs) == nil {
			return fmt.Errorf("%w: %s lacks its buckets", ErrStoreUnreadable, s.path)
		}
		return checkSchema(btx, s.path)
	})
}

// Update runs fn in one durable read-write transaction: all of fn's writes
// land together (fsynced) or none do. A transaction in which fn wrote nothing
// is rolled back instead of committed: a commit costs two fdatasyncs even when
// empty, and a repeated DEL (runtimes retry teardown) or a commit marker
// finding its records already committed change nothing.
//
// A panic of bbolt on a page it reads (or a fault on the mapping) is returned
// as ErrStorePageDamaged; a failure to write or sync as a *StoreIOError.
func (s *Store) Update(fn func(*Tx) error) (err error) {
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
	tx := wrapTx(btx)
	if tx.allocs != nil {
		// Addresses are handed out in ascending (round-robin) order, so
		// allocs mostly grows at its end. bbolt's default split point (50%)
		// would leave every leaf half empty for good; at 90% an ADD that
		// steps over reserved addresses to find a free one (1 000 of them
		// at 99.9 % of a pool) reads about half as many pages.
		tx.allocs.FillPercent = 0.9
	}
	err = fn(tx)
	finished = true
	switch {
	case err != nil:
		_ = btx.Rollback()
		return err
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
// A panic of bbolt on a page it reads is returned as ErrStorePageDamaged.
func (s *Store) View(fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverDamaged(&err, s.path)
	return s.db.View(func(btx *bolt.Tx) error { return fn(wrapTx(btx)) })
}

// recoverCorrupt turns a panic from a corrupt page into ErrStoreUnreadable.
// Callers also set debug.SetPanicOnFault so that touching a page beyond the end of a
// truncated, mmapped file (SIGBUS) is a recoverable panic, not a crash.
func recoverCorrupt(err *error, path string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %v", ErrStoreUnreadable, path, r)
	}
}

// recoverDamaged turns a panic met by a transaction of an open store into
// ErrStorePageDamaged (see errors.go for why this is not ErrStoreUnreadable).
func recoverDamaged(err *error, path string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: a page could not be read: %v", ErrStorePageDamaged, path, r)
	}
}

func wrapTx(btx *bolt.Tx) *Tx {
	tx := &Tx{
		btx:        btx,
		meta:       btx.Bucket(bucketMeta),
		allocs:     btx.Bucket(bucketAllocs),
		taken:      btx.Bucket(bucketTaken),
		owners:     btx.Bucket(bucketOwners),
		exhaustion: btx.Bucket(bucketExhaustion),
		audit:      btx.Bucket(bucketAudit),
		imported:   btx.Bucket(bucketImported),
	}
	tx.reserved = takenBits{tx.taken}
	if tx.taken == nil {
		tx.reserved = recordKeys{tx.allocs}
	}
	return tx
}
