package trustfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mustOpen(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// WriteFile replaces a link at the name (never writing through it), and
// creates its temporary file under a new random name: a link left at any
// name is never written through.
func TestWriteFileNeverThroughLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "name")); err != nil {
		t.Fatal(err)
	}
	d := mustOpen(t, dir)
	for range 3 {
		if err := d.WriteFile("name", []byte("new"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	fi, err := os.Lstat(filepath.Join(dir, "name"))
	if b, _ := os.ReadFile(filepath.Join(dir, "name")); err != nil || !fi.Mode().IsRegular() || string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Errorf("name: %v %v %q", fi, err, b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// OpenFile and Touch refuse a link, a FIFO (without blocking on it) and a
// directory at the name; a missing file is created 0600.
func TestOpenFileRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	d := mustOpen(t, dir)
	os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "link"))
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for name, errno := range map[string]syscall.Errno{"link": syscall.ELOOP, "fifo": syscall.EINVAL, "sub": syscall.EINVAL} {
			err := d.Touch(name)
			if !IsUntrusted(err) || !errors.Is(err, errno) || !strings.Contains(err.Error(), filepath.Join(dir, name)) {
				t.Errorf("Touch(%s): %v, want a refusal (%v) naming it", name, err, errno)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // hang guard only
		t.Fatal("hung: Touch blocked on a FIFO")
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Touch created the dangling link's target: %v", err)
	}
	if err := d.Touch("kick"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "kick")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("kick: %v %v", fi, err)
	}
}

// OpenDir and Sub refuse a symlink at the last component (naming its
// target) and a directory writable by group or others; a missing one is
// fs.ErrNotExist.
func TestOpenDirRefusals(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	os.Mkdir(real, 0o755)
	os.Symlink(real, filepath.Join(base, "link"))
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o775)
	if _, err := OpenDir(filepath.Join(base, "link")); !IsUntrusted(err) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), `symlink to "`+real+`"`) {
		t.Errorf("OpenDir(link): %v", err)
	}
	if _, err := OpenDir(open); !IsUntrusted(err) || !strings.Contains(err.Error(), "writable by group (owner uid") || !strings.Contains(err.Error(), "mode 0775") {
		t.Errorf("OpenDir(group-writable): %v", err)
	}
	if _, err := OpenDir(filepath.Join(base, "none")); IsUntrusted(err) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenDir(missing): %v", err)
	}
	d := mustOpen(t, base)
	if _, err := d.Sub("link", true, 0o755); !IsUntrusted(err) || !errors.Is(err, syscall.ELOOP) {
		t.Errorf("Sub(link): %v", err)
	}
	sub, err := d.Sub("made", true, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
}
