package store

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hostlease/hostlease/internal/testing/testbin"
)

// A data dir swapped for a symlink between the check and the act: another
// user (uid 65534) who can write the data dir's parent moves the data dir
// aside and puts a link to a directory of root's in its place, at the exact
// moment after hostlease checked the data dir (or proved its locked file)
// and before it creates, links, renames or removes anything. Whatever it
// does then happens in the data dir it checked, or it refuses; nothing is
// created in, linked into or removed from the directory the link names.

// swapRig is a trusted data dir whose parent uid 65534 can write, and a
// victim: a directory root may write, somewhere else, watched (inotify) for
// every name created, removed or renamed in it.
type swapRig struct {
	parent, data, moved, victim string
	watch                       int
	swapped                     bool
}

func newSwapRig(t *testing.T) *swapRig {
	t.Helper()
	testbin.NeedRoot(t)
	base := testbin.OpenTempDir(t)
	r := &swapRig{parent: filepath.Join(base, "parent"), victim: filepath.Join(base, "victim"), watch: -1}
	r.data, r.moved = filepath.Join(r.parent, "data"), filepath.Join(r.parent, "data.orig")
	for _, d := range []string{r.parent, r.data, r.victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(r.parent, testbin.Nobody, testbin.Nobody); err != nil {
		t.Fatal(err)
	}
	return r
}

// arm starts watching the victim and makes the next check point swap the
// data dir (as uid 65534: mv, then ln -s).
func (r *swapRig) arm(t *testing.T) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, r.victim, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		t.Fatal(err)
	}
	r.watch = fd
	checkedHook = func() {
		if !r.swapped {
			r.swapped = true
			testbin.AsNobody(t, "/bin/sh", "-c", `mv "$1" "$2" && ln -s "$3" "$1"`, "sh", r.data, r.moved, r.victim)
		}
	}
	t.Cleanup(func() { checkedHook = nil })
}

func (r *swapRig) list(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// victimUntouched fails the test unless the swap happened and no name was
// created, written, removed or renamed in the victim since arm, and it
// holds exactly want.
func (r *swapRig) victimUntouched(t *testing.T, want ...string) {
	t.Helper()
	checkedHook = nil
	if !r.swapped {
		t.Fatal("no check point was reached: the data dir was never swapped")
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(r.watch, buf)
		if err != nil || n <= 0 {
			break
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			t.Errorf("root acted by path through the swapped-in link: %s in the directory it names (inotify mask %#x)", name, ev.Mask)
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	if names := r.list(t, r.victim); !slices.Equal(names, want) {
		t.Errorf("the directory the swapped-in link names holds %q, want %q", names, want)
	}
}

func plantOld(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * StaleTempAge)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// A network's first use: the store (and its temporary file) is created in
// the data dir checked, and the stale-temp cleanup that precedes it removes
// nothing in the victim.
func TestCreateInSwappedDataDir(t *testing.T) {
	r := newSwapRig(t)
	stale := tempPrefix("net1.db") + "1"
	plantOld(t, filepath.Join(r.victim, stale))
	r.arm(t)
	s, err := Open(filepath.Join(r.data, "net1.db"), OpenOptions{Create: true, LockTimeout: 5 * time.Second})
	r.victimUntouched(t, stale)
	if err != nil {
		if !IsEnvironmentError(err) {
			t.Fatalf("Open(Create) across the swap: %v, want success in the checked dir or a refusal", err)
		}
		return
	}
	defer s.Close()
	if fi, err := os.Lstat(filepath.Join(r.moved, "net1.db")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("Open(Create) succeeded but the checked data dir holds no store: %v", err)
	}
	update(t, s, func(tx *Tx) error { return tx.SetNetwork("net1") })
}

// storeAt makes a store for net1 under dir holding network name.
func storeAt(t *testing.T, dir, network string) string {
	t.Helper()
	path := filepath.Join(dir, "net1.db")
	s, err := Open(path, OpenOptions{Create: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx *Tx) error { return tx.SetNetwork(network) })
	s.Close()
	return path
}

func networkAt(t *testing.T, path string) string {
	t.Helper()
	s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer s.Close()
	var n string
	view(t, s, func(tx *Tx) error { n = tx.Network(); return nil })
	return n
}

// A set-aside after the swap links the locked file in the checked data dir,
// never into the victim (which holds a file of the store's name).
func TestSetAsideInSwappedDataDir(t *testing.T) {
	r := newSwapRig(t)
	path := storeAt(t, r.data, "old")
	if err := os.WriteFile(filepath.Join(r.victim, "net1.db"), []byte("the victim's own file"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := LockFile(path, LockOptions{Exclusive: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r.arm(t)
	aside, err := l.SetAside(func(n int) string { return path + ".corrupt-" + string(rune('0'+n)) })
	r.victimUntouched(t, "net1.db")
	if err != nil {
		return // refused
	}
	l.Close()
	if got := networkAt(t, filepath.Join(r.moved, filepath.Base(aside))); got != "old" {
		t.Errorf("set-aside %s in the checked dir holds network %q, want the locked store's", aside, got)
	}
}

// A replace after the swap builds its new store in the checked data dir and
// renames it over the locked file there; nothing is created in the victim.
func TestReplaceInSwappedDataDir(t *testing.T) {
	r := newSwapRig(t)
	path := storeAt(t, r.data, "old")
	if err := os.WriteFile(filepath.Join(r.victim, "net1.db"), []byte("the victim's own file"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := LockFile(path, LockOptions{Exclusive: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r.arm(t)
	err = l.Replace(func(tx *Tx) error { return tx.SetNetwork("new") })
	r.victimUntouched(t, "net1.db")
	if b, _ := os.ReadFile(filepath.Join(r.victim, "net1.db")); string(b) != "the victim's own file" {
		t.Errorf("the victim's file was replaced: %q", b)
	}
	if err != nil {
		return // refused
	}
	l.Close()
	if got := networkAt(t, filepath.Join(r.moved, "net1.db")); got != "new" {
		t.Errorf("after Replace the checked dir's store holds network %q, want the new one", got)
	}
	for _, n := range r.list(t, r.moved) {
		if strings.HasPrefix(n, ".new-") {
			t.Errorf("temporary file %s left in the checked dir", n)
		}
	}
}

// The daemon's cleanup of stale temporary stores removes them in the data
// dir it checked, never in the victim.
func TestCleanStaleTempInSwappedDataDir(t *testing.T) {
	r := newSwapRig(t)
	stale := tempPrefix("net1.db") + "1"
	plantOld(t, filepath.Join(r.data, stale))
	plantOld(t, filepath.Join(r.victim, stale))
	r.arm(t)
	_, err := CleanStaleTemp(r.data, StaleTempAge, time.Now())
	r.victimUntouched(t, stale)
	if err != nil {
		return // refused
	}
	if names := r.list(t, r.moved); len(names) != 0 {
		t.Errorf("the checked data dir still holds %q", names)
	}
}
