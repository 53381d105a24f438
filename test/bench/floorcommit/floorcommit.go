// Package floorcommit is the durable part of the benchmarks' durable floors:
// the least a crash-safe IPAM plugin writes per call. It uses nothing but
// syscall and os (no Go poller, no CNI library), so a floor built on it adds
// only that cost to the runtime's.
package floorcommit

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
)

// pageSize is the size of each of the two pages written (a bbolt page).
const pageSize = 4096

// Commit takes an exclusive flock on <dataDir>/durable-floor.db, writes one
// 4 KiB page and fdatasyncs it, then writes a second 4 KiB page (the "meta"
// page that would point at the first) and fdatasyncs again — the two ordered
// syncs of a copy-on-write commit such as bbolt's — and releases the lock.
// The pages hold the verb and container ID, so every call writes new bytes.
func Commit(dataDir, verb, containerID string) error {
	fd, err := openLocked(dataDir, "durable-floor.db")
	if err != nil {
		return err
	}
	defer syscall.Close(fd) // also releases the lock
	var page [pageSize]byte
	copy(page[:], verb+" "+containerID)
	// The data page first, made durable, then the page that commits it.
	for _, off := range []int64{2 * pageSize, 0} {
		if _, err := syscall.Pwrite(fd, page[:], off); err != nil {
			return err
		}
		if err := syscall.Fdatasync(fd); err != nil {
			return err
		}
	}
	return nil
}

// DataDir finds the string value of a network config's "dataDir" key by
// scanning its bytes (the benchmark's configs have exactly one, unescaped),
// so that the static durable floor decodes no JSON.
func DataDir(conf []byte) string {
	const key = `"dataDir":"`
	i := bytes.Index(conf, []byte(key))
	if i < 0 {
		return ""
	}
	rest := conf[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// openLocked opens (creating it and dataDir if need be) <dataDir>/name and
// waits in the kernel for an exclusive flock on it; closing the fd releases
// the lock.
func openLocked(dataDir, name string) (int, error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return -1, err
	}
	fd, err := syscall.Open(filepath.Join(dataDir, name), syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}
