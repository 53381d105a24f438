package store

import (
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

// checkLength refuses a store file shorter than the pages its meta page says
// are allocated. bbolt grows the file (and fsyncs it) before a commit can refer
// to a new page, so a healthy store is never shorter than that; a shorter one
// was cut afterwards (a partial copy, a broken disk or filesystem). Even when
// every page in use happens to survive, it is damaged evidence, and serving
// from it would rewrite it: ADD and DEL would silently carry on.
//
// It runs inside the first transaction of an open (which holds the file lock,
// so no writer grows the file meanwhile) on the file bbolt opened, or on path
// where that file is not known.
func checkLength(tx *bolt.Tx, f *os.File, path string) error {
	var fi os.FileInfo
	var err error
	if f != nil {
		fi, err = f.Stat()
	} else {
		fi, err = os.Stat(path)
	}
	if err != nil {
		return err
	}
	if hwm := tx.Size(); fi.Size() < hwm {
		return fmt.Errorf("%w: %s is truncated: %d bytes, but its meta page accounts for %d", ErrUnreadable, path, fi.Size(), hwm)
	}
	return nil
}
