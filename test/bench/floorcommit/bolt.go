package floorcommit

import (
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// BoltCommit is the least a crash-safe plugin keeping its state in bbolt (as
// hostlease does) writes per call: under an exclusive flock of
// <dataDir>/bolt-floor.lock, waited for in the kernel as hostlease waits for
// its store's, it opens <dataDir>/bolt-floor.db with bbolt's defaults and, in
// one read-write transaction, puts (ADD) or deletes (DEL) the container's key
// in one bucket; the commit is bbolt's (data pages, fdatasync, meta page,
// fdatasync). No index, no record encoding, no policy: what hostlease costs
// above it is its own store layout and logic.
func BoltCommit(dataDir, verb, containerID string) error {
	lock, err := openLocked(dataDir, "bolt-floor.lock")
	if err != nil {
		return err
	}
	defer syscall.Close(lock) // also releases the lock
	db, err := bolt.Open(filepath.Join(dataDir, "bolt-floor.db"), 0o600, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("calls"))
		if err != nil {
			return err
		}
		if verb == "DEL" {
			return b.Delete([]byte(containerID))
		}
		return b.Put([]byte(containerID), []byte(verb))
	})
}
