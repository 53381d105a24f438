package store

import (
	bolt "go.etcd.io/bbolt"

	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"time"
)

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
		return nil, &IOError{Op: "read directory", Path: dir, Err: unwrapPath(err)}
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

// create makes a complete store file at path without path ever existing
// empty or incomplete. bbolt creates a file and only then locks and
// initialises it, so a concurrent first use of the network would see an empty
// file, which Open must treat as lost state; and a store without its buckets
// is damage to the daemon, which would set it aside. The store is built
// complete under a private name (createTemp) and hard-linked into place; if
// another process got there first, its store is kept. Stale private files of
// killed creators are removed first (CleanStaleTemp).
func create(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &IOError{Op: "create directory", Path: dir, Err: unwrapPath(err)}
	}
	_, _ = CleanStaleTemp(dir, StaleTempAge, time.Now())
	st, err := createTemp(path)
	if err != nil {
		return err
	}
	tmp := st.path
	defer os.Remove(tmp)
	if err := st.Close(); err != nil {
		return classifyOpenError(path, "create", err)
	}
	// link(2) never follows its new path: a symlink there (dangling or not)
	// is EEXIST, and the Open that follows refuses it.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return &IOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	if err := syncDir(dir); err != nil {
		return &IOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	return nil
}

// createTemp makes a complete, empty store of this schema (every bucket, the
// schema, the records count: what a read-write Open would add) under a
// random name created exclusively beside path (tempPrefix, which
// CleanStaleTemp knows), fsynced, and returns it open read-write and locked;
// its Path is the temporary name. The caller fills it, closes it and links or
// renames it into place.
func createTemp(path string) (*Store, error) {
	f, err := os.CreateTemp(filepath.Dir(path), tempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return nil, &IOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	tmp := f.Name()
	// bbolt initialises the very file created here (an empty file), never
	// what the name might point to by then.
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil }})
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, classifyOpenError(path, "create", err)
	}
	s := &Store{db: db, path: tmp, file: f}
	if err := s.initialise(); err != nil {
		db.Close()
		os.Remove(tmp)
		return nil, err
	}
	return s, nil
}
