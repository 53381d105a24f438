package store

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/proclocks"
	"github.com/hostlease/hostlease/pkg/allocator"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// recordsAt reads the store at path: address -> "containerID/ifname".
func recordsAt(t *testing.T, path string) map[string]string {
	t.Helper()
	s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: hangGuard})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string]string{}
	view(t, s, func(tx *Tx) error {
		return tx.ForEach(func(r *allocator.Record) error {
			out[r.IP.String()] = r.ContainerID + "/" + r.IfName
			return nil
		})
	})
	return out
}

// hangGuard bounds a wait for an order of events; it is not a budget.
const hangGuard = time.Minute

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// waitForWaiter waits until some thread of this process is blocked waiting
// for the flock of inode ino.
func waitForWaiter(t *testing.T, ino uint64) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !proclocks.Waiting(os.Getpid(), ino); {
		if time.Now().After(deadline) {
			t.Fatalf("hung: nobody waited for the lock of inode %d", ino)
		}
		time.Sleep(time.Millisecond)
	}
}

// An opener blocked on the lock of a file that a replacer then renames a new
// store over (holding the old file's lock from before the opener's open to
// after the rename, as the contract says) proves, once it has the lock, that
// its file is no longer the one at the path, and opens the new one: it reads
// the new store's records and its write lands in the file at the path, not in
// the replaced one. Read-write and read-only opens alike.
func TestOpenRetriesOnFileReplacedWhileWaiting(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "read-write", true: "read-only"}[readOnly], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "net1.db")
			s, err := Open(path, OpenOptions{Create: true})
			if err != nil {
				t.Fatal(err)
			}
			update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "old", "eth0")) })
			s.Close()
			oldIno := inode(t, path)

			replacer, err := LockFile(path, LockOptions{Exclusive: true, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			type opened struct {
				s   *Store
				err error
			}
			done := make(chan opened, 1)
			go func() {
				s, err := Open(path, OpenOptions{ReadOnly: readOnly, LockTimeout: hangGuard})
				done <- opened{s, err}
			}()
			waitForWaiter(t, oldIno) // the opener holds the old file and waits for its lock
			if err := replacer.Replace(func(tx *Tx) error { return tx.Put(rec("10.0.0.3", "new", "eth0")) }); err != nil {
				t.Fatal(err)
			}
			if inode(t, path) == oldIno {
				t.Fatal("Replace left the old file at the path")
			}
			replacer.Close()
			o := <-done
			if o.err != nil {
				t.Fatalf("Open after the replace: %v", o.err)
			}
			defer o.s.Close()
			view(t, o.s, func(tx *Tx) error {
				if !tx.HasRecord(addr("10.0.0.3")) || tx.HasRecord(addr("10.0.0.2")) {
					t.Errorf("Open read the replaced file: new record %v, old record %v", tx.HasRecord(addr("10.0.0.3")), tx.HasRecord(addr("10.0.0.2")))
				}
				return nil
			})
			if readOnly {
				return
			}
			update(t, o.s, func(tx *Tx) error { return tx.Put(rec("10.0.0.4", "late", "eth0")) })
			o.s.Close()
			if got := recordsAt(t, path); got["10.0.0.4"] == "" {
				t.Errorf("the write of an opener that waited for the replaced file is not in the store at the path: %v", got)
			}
		})
	}
}

// A file that vanished while its opener waited for its lock is as if it had
// been missing: without Create, ErrNotExist; with Create, a new store.
func TestOpenFileVanishedWhileWaiting(t *testing.T) {
	for _, create := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "net1.db")
		s, err := Open(path, OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		ino := inode(t, path)
		holder, err := LockFile(path, LockOptions{Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			s, err := Open(path, OpenOptions{Create: create, LockTimeout: hangGuard})
			if err == nil {
				s.Close()
			}
			done <- err
		}()
		waitForWaiter(t, ino)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		holder.Close()
		err = <-done
		switch {
		case create && err != nil:
			t.Errorf("Open(Create) of a store removed while it waited: %v, want a new store", err)
		case !create && !errors.Is(err, os.ErrNotExist):
			t.Errorf("Open of a store removed while it waited: %v, want ErrNotExist", err)
		}
	}
}

// create links a store into place only once it is complete: the moment the
// path exists, a read-only Open (the daemon's) finds every bucket and the
// schema. Nobody ever sees a store that "lacks its buckets".
func TestCreateLinksOnlyCompleteStores(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		path := FilePath(dir, "net"+string(rune('a'+i)))
		d, err := openDataDir(path, false)
		if err != nil {
			t.Fatal(err)
		}
		err = create(d, path)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: time.Second})
		if err != nil {
			t.Fatalf("a read-only Open of the store create linked into place: %v", err)
		}
		view(t, s, func(tx *Tx) error {
			if tx.taken == nil || tx.owners == nil || tx.audit == nil || tx.imported == nil || tx.exhaustion == nil {
				t.Errorf("store linked into place without its derived buckets")
			}
			return nil
		})
		s.Close()
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if isTempName(e.Name()) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// A file bbolt cannot open is locked all the same: LockFile holds it (others
// time out), its view reports the damage, the lock survives that, and Replace
// puts a healthy store in its place.
func TestLockFileDamagedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net1.db")
	if err := os.WriteFile(path, []byte("not a bbolt file, but some bytes of one............"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := LockFile(path, LockOptions{Exclusive: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("LockFile of a damaged file: %v", err)
	}
	defer l.Close()
	if _, err := l.Store(); !errors.Is(err, ErrUnreadable) {
		t.Errorf("view of a damaged file: %v, want ErrUnreadable", err)
	}
	if _, err := Open(path, OpenOptions{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLockTimeout) {
		t.Errorf("Open while the damaged file is locked (after its view failed): %v, want ErrLockTimeout", err)
	}
	if err := l.Replace(func(tx *Tx) error { return tx.Put(rec("10.0.0.9", "c", "eth0")) }); err != nil {
		t.Fatalf("Replace: %v", err)
	}
	l.Close()
	if got := recordsAt(t, path); got["10.0.0.9"] != "c/eth0" {
		t.Errorf("replaced store: %v", got)
	}
}

// A view of a locked store reads it and keeps the lock: writers wait until
// the LockedFile is closed; the view refuses to write.
func TestLockFileViewKeepsTheLock(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "c1", "eth0")) })
	s.Close()
	l, err := LockFile(s.Path(), LockOptions{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	v, err := l.Store()
	if err != nil {
		t.Fatal(err)
	}
	view(t, v, func(tx *Tx) error {
		if tx.Count() != 1 {
			t.Errorf("view counts %d records", tx.Count())
		}
		return nil
	})
	if err := v.Update(func(*Tx) error { return nil }); err == nil {
		t.Error("a view wrote")
	}
	v.Close() // does not release the lock
	if _, err := Open(s.Path(), OpenOptions{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLockTimeout) {
		t.Errorf("Open while a LockedFile with a view holds the store: %v, want ErrLockTimeout", err)
	}
	l.Close()
	s2, err := Open(s.Path(), OpenOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open after the LockedFile closed: %v", err)
	}
	s2.Close()
}

// SetAside never writes through or over an existing name: a symlink planted
// at the first name is left as it is (and its target untouched), the next
// free name is used, and it is the locked file.
func TestSetAsideExclusiveNames(t *testing.T) {
	s := newStore(t)
	s.Close()
	dir := filepath.Dir(s.Path())
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := func(n int) string { return filepath.Join(dir, "aside."+string(rune('0'+n))) }
	if err := os.Symlink(target, name(0)); err != nil {
		t.Fatal(err)
	}
	l, err := LockFile(s.Path(), LockOptions{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	aside, err := l.SetAside(name)
	if err != nil {
		t.Fatal(err)
	}
	if aside != name(1) || inode(t, aside) != inode(t, s.Path()) {
		t.Errorf("set aside as %s (inode %d), want %s, the store (inode %d)", aside, inode(t, aside), name(1), inode(t, s.Path()))
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("symlink target changed: %q", b)
	}
}
