package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	berrors "go.etcd.io/bbolt/errors"
)

func TestErrorClasses(t *testing.T) {
	path := "/var/lib/cni/hostlease/n.db"
	cases := []struct {
		name              string
		err               error
		unreadable, envir bool
		mention           []string
	}{
		{"bbolt invalid", berrors.ErrInvalid, true, false, nil},
		{"bbolt checksum", berrors.ErrChecksum, true, false, nil},
		{"bbolt version", berrors.ErrVersionMismatch, true, false, nil},
		{"file too small", errors.New("file size too small 12"), true, false, nil},
		{"read-only fs", &os.PathError{Op: "open", Path: path, Err: syscall.EROFS}, false, true, []string{"EROFS", path}},
		{"immutable", &os.PathError{Op: "open", Path: path, Err: syscall.EPERM}, false, true, []string{"EPERM"}},
		{"permission", &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}, false, true, []string{"EACCES"}},
		{"too many files", &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}, false, true, []string{"EMFILE"}},
		{"file table full", &os.PathError{Op: "open", Path: path, Err: syscall.ENFILE}, false, true, []string{"ENFILE"}},
		{"no space", fmt.Errorf("write: %w", syscall.ENOSPC), false, true, []string{"ENOSPC"}},
		{"quota", syscall.EDQUOT, false, true, []string{"EDQUOT"}},
		{"i/o", &os.SyscallError{Syscall: "fdatasync", Err: syscall.EIO}, false, true, []string{"EIO"}},
		{"flock", fmt.Errorf("flock: %w", syscall.ENOLCK), false, true, []string{"ENOLCK"}},
		{"mmap", fmt.Errorf("mmap allocate error: %s", syscall.ENOMEM), false, true, []string{"ENOMEM"}},
		{"resize, errno as text", fmt.Errorf("file resize error: %s", syscall.ENOSPC), false, true, []string{"ENOSPC", path}},
		{"sync, errno as text", fmt.Errorf("file sync error: %s", syscall.EIO), false, true, []string{"EIO"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := classifyOpenError(path, "open", tc.err)
			if got := errors.Is(err, ErrUnreadable); got != tc.unreadable {
				t.Errorf("%v: unreadable = %v, want %v", err, got, tc.unreadable)
			}
			if got := IsEnvironmentError(err); got != tc.envir {
				t.Errorf("%v: environment = %v, want %v", err, got, tc.envir)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q does not name %s", err, m)
				}
			}
			if tc.envir {
				if err := classifyTxError(path, tc.err); !IsEnvironmentError(err) {
					t.Errorf("commit error %v not an environment error", err)
				}
			}
		})
	}
}

// A read-only store file is an environment error for a read-write open, and
// opens read-only.
func TestOpenReadOnlyFileIsEnvironment(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes through file modes; the plugin-process tests cover read-only file systems and immutable files")
	}
	path := filepath.Join(t.TempDir(), "n.db")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	os.Chmod(path, 0o400)
	if _, err := Open(path, OpenOptions{}); !IsEnvironmentError(err) || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("read-write open of a read-only file: %v", err)
	}
	s, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// Open never follows a symlink at the store path, and never creates a file
// at its target.
func TestOpenRefusesSymlink(t *testing.T) {
	for _, dangling := range []bool{true, false} {
		t.Run(fmt.Sprintf("dangling=%v", dangling), func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "elsewhere.db")
			if !dangling {
				s, err := Open(target, OpenOptions{Create: true})
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
			}
			path := FilePath(dir, "net1")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			for _, o := range []OpenOptions{{Create: true}, {}, {ReadOnly: true}} {
				_, err := Open(path, o)
				if !IsEnvironmentError(err) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "symlink") {
					t.Errorf("Open(%+v) through a symlink: %v; want an ELOOP error naming %s", o, err, path)
				}
			}
			if _, err := os.Stat(target); dangling && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a file was created at the symlink's target: %v", err)
			}
			// bbolt's own open, past the lstat: O_NOFOLLOW.
			if _, err := openBlocking(mustDir(t, dir), path, os.O_RDWR); !errors.Is(err, syscall.ELOOP) {
				t.Errorf("openBlocking through a symlink: %v", err)
			}
		})
	}
}
