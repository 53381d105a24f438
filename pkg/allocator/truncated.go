package allocator

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
func checkLength(db *bolt.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return db.View(func(tx *bolt.Tx) error {
		if hwm := tx.Size(); fi.Size() < hwm {
			return fmt.Errorf("%w: %s is truncated: %d bytes, but its meta page accounts for %d", ErrStoreUnreadable, path, fi.Size(), hwm)
		}
		return nil
	})
}
