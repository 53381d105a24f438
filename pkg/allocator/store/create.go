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

	"github.com/hostlease/hostlease/internal/trustfs"
)

// tempPrefix is the name prefix of the private file create builds a store
// in: ".new-", 16 hex digits of a hash of the store's file name, "-". It fits
// NAME_MAX whatever the network name (trustfs.Dir.CreateTemp appends 16 hex
// digits).
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
// every sweep. A missing dir is not an error; a dir refused by trustfs's
// contract is (ErrUntrusted), and nothing in it is removed. Everything after
// the check is relative to the directory opened (cleanStaleTemp).
func CleanStaleTemp(dir string, minAge time.Duration, now time.Time) ([]string, error) {
	d, err := trustfs.OpenDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case trustfs.IsUntrusted(err):
		return nil, err
	case err != nil:
		return nil, &IOError{Op: "read directory", Path: dir, Err: unwrapPath(err)}
	}
	defer d.Close()
	checked()
	return cleanStaleTemp(d, minAge, now)
}

// cleanStaleTemp is CleanStaleTemp in the checked directory d: each name is
// judged by fstatat and removed by unlinkat, relative to d's descriptor.
func cleanStaleTemp(d *trustfs.Dir, minAge time.Duration, now time.Time) ([]string, error) {
	entries, err := d.Entries()
	if err != nil {
		return nil, &IOError{Op: "read directory", Path: d.Path(), Err: unwrapPath(err)}
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if !isTempName(name) || e.IsDir() {
			continue
		}
		fi, err := d.Info(name)
		if err != nil || !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) < minAge {
			continue
		}
		if err := d.Remove(name); err == nil {
			removed = append(removed, filepath.Join(d.Path(), name))
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

// create makes a complete store file at path, in dir (its data dir, opened
// and checked by openDataDir), without path ever existing empty or
// incomplete. bbolt creates a file and only then locks and initialises it, so
// a concurrent first use of the network would see an empty file, which Open
// must treat as lost state; and a store without its buckets is damage to the
// daemon, which would set it aside. The store is built complete in a
// trustfs.Temp (createTemp) and hard-linked into place (Temp.Link: never
// over an existing name); if another process got there first, its store is
// kept. Stale private files of killed creators are removed first
// (cleanStaleTemp). Everything is relative to dir's descriptor.
func create(dir *trustfs.Dir, path string) error {
	_, _ = cleanStaleTemp(dir, StaleTempAge, time.Now())
	st, tmp, err := createTemp(dir, path)
	if err != nil {
		return err
	}
	defer tmp.Abort()
	if err := st.Close(); err != nil {
		return classifyOpenError(path, "create", err)
	}
	// A symlink at path (dangling or not) is EEXIST, and the Open that
	// follows refuses it.
	if err := tmp.Link(filepath.Base(path)); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return &IOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	return nil
}

// createTemp makes a complete, empty store of this schema (every bucket, the
// schema, the records count: what a read-write Open would add) in a
// trustfs.Temp of dir named tempPrefix (which CleanStaleTemp knows), and
// returns it open read-write and locked, with the Temp; the Store's Path is
// the temporary name. The caller fills the store, closes it and commits the
// Temp (Link or Rename, which fsync it and the directory), or Aborts it.
func createTemp(dir *trustfs.Dir, path string) (*Store, *trustfs.Temp, error) {
	tmp, err := dir.CreateTemp(tempPrefix(filepath.Base(path)), 0o600)
	if err != nil {
		return nil, nil, &IOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	// bbolt initialises the very file created here (an empty file), through
	// a second descriptor of it: bbolt closes its own, the Temp keeps one
	// to commit.
	f, err := dupFile(tmp.File())
	if err != nil {
		tmp.Abort()
		return nil, nil, &IOError{Op: "create", Path: path, Err: unwrapPath(err)}
	}
	db, err := bolt.Open(tmp.Path(), 0o600, &bolt.Options{OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil }})
	if err != nil {
		f.Close()
		tmp.Abort()
		return nil, nil, classifyOpenError(path, "create", err)
	}
	s := &Store{db: db, path: tmp.Path(), file: f}
	if err := s.initialise(); err != nil {
		db.Close()
		tmp.Abort()
		return nil, nil, err
	}
	return s, tmp, nil
}
