package store

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

func TestOpenCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := FilePath(dir, "net1")
	if _, err := Open(path, OpenOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open without Create on a missing store: err = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open without Create made %s", dir)
	}
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatalf("Open with Create: %v", err)
	}
	if s.Path() != path {
		t.Errorf("Path = %q, want %q", s.Path(), path)
	}
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "c1", "eth0")) })
	s.Close()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "net1.db" {
		t.Errorf("data dir holds %v, want only net1.db", entries)
	}
	s, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen read-only: %v", err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		if !tx.Taken(netip.MustParseAddr("10.0.0.2")) || tx.Count() != 1 {
			t.Errorf("reopened store lost its record (count %d)", tx.Count())
		}
		return nil
	})
}

// Pods starting at once on a fresh node all open a store that does not exist
// yet. None of them may see a half-created (empty) file and fail as if the
// store had been lost.
func TestOpenConcurrentFirstUse(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "net1.db")
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				s, err := Open(path, OpenOptions{Create: true, LockTimeout: 5 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				defer s.Close()
				errs <- s.Update(func(tx *Tx) error { return tx.Put(rec(fmt.Sprintf("10.0.0.%d", i+2), fmt.Sprint("c", i), "eth0")) })
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent first Open/Update: %v", round, err)
			}
		}
		s, err := Open(path, OpenOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		view(t, s, func(tx *Tx) error {
			if tx.Count() != n {
				t.Errorf("round %d: %d records, want %d", round, tx.Count(), n)
			}
			return nil
		})
		s.Close()
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Errorf("round %d: data dir holds %d files, want only the store", round, len(entries))
		}
	}
}

func TestOpenLockTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net1.db")
	holder, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []OpenOptions{{LockTimeout: 150 * time.Millisecond}, {LockTimeout: 150 * time.Millisecond, ReadOnly: true}} {
		s, err := Open(path, mode)
		if err == nil {
			s.Close()
			t.Fatalf("readOnly=%v: Open succeeded while another handle holds the lock", mode.ReadOnly)
		}
		if !errors.Is(err, ErrLockTimeout) {
			t.Fatalf("readOnly=%v: err = %v, want ErrLockTimeout", mode.ReadOnly, err)
		}
		if errors.Is(err, ErrUnreadable) {
			t.Errorf("a busy store was reported unreadable: %v", err)
		}
		if !strings.Contains(err.Error(), "(150ms)") || !strings.Contains(err.Error(), path) {
			t.Errorf("readOnly=%v: %q does not name the timeout and the store", mode.ReadOnly, err)
		}
	}
	// The lock is released on Close: a waiting opener gets in, and only then.
	var closed atomic.Bool
	done := make(chan error, 1)
	go func() {
		s, err := Open(path, OpenOptions{LockTimeout: time.Minute}) // a hang guard
		if err == nil {
			if !closed.Load() {
				err = errors.New("Open returned while the holder still held the lock")
			}
			s.Close()
		}
		done <- err
	}()
	closed.Store(true)
	holder.Close()
	if err := <-done; err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
}

// TestUpdateWithoutWritesCommitsNothing: a read-write transaction that writes
// nothing (a repeated DEL, an unknown container) is rolled back, so the file
// is not touched (no commit, no fdatasync); one that writes is committed.
func TestUpdateWithoutWritesCommitsNothing(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "c1", "eth0")) })
	txid := func() (id int) {
		if err := s.db.View(func(btx *bolt.Tx) error { id = btx.ID(); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	before, beforeBytes := txid(), readFile(t, s.Path())
	update(t, s, func(tx *Tx) error {
		recs, err := allocator.Release(tx, allocator.Attachment{ContainerID: "unknown", IfName: "eth0"}, allocator.Why{Reason: "DEL", By: "plugin"}, time.Now())
		if len(recs) != 0 {
			t.Errorf("released %v", ips(recs))
		}
		return err
	})
	if after := txid(); after != before || !bytes.Equal(readFile(t, s.Path()), beforeBytes) {
		t.Errorf("a transaction that wrote nothing was committed: txid %d -> %d, file changed %v", before, after, !bytes.Equal(readFile(t, s.Path()), beforeBytes))
	}
	update(t, s, func(tx *Tx) error {
		_, err := allocator.Release(tx, allocator.Attachment{ContainerID: "c1", IfName: "eth0"}, allocator.Why{Reason: "DEL", By: "plugin"}, time.Now())
		return err
	})
	if after := txid(); after != before+1 {
		t.Errorf("a release was not committed: txid %d -> %d", before, after)
	}
	view(t, s, func(tx *Tx) error {
		if tx.Count() != 0 {
			t.Errorf("Count %d after the release", tx.Count())
		}
		return nil
	})
}
