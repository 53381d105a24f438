package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hostlease/hostlease/internal/trustfs"
)

func mustDir(t *testing.T, dir string) *trustfs.Dir {
	t.Helper()
	d, err := trustfs.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// A store file or data dir another user owns or can write is refused by
// every open (create, read-write, read-only) with an environment error
// naming the path, the owner and mode and the fix, and is left unchanged.
func TestOpenRefusesUntrusted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	const nobody = 65534
	cases := []struct {
		name string
		// prepare damages a healthy store at path in dir; it returns the
		// refused path and what the error must say.
		prepare func(t *testing.T, dir, path string) (refused string, want []string)
	}{
		{"file owned by another user", func(t *testing.T, dir, path string) (string, []string) {
			must(t, os.Chown(path, nobody, nobody))
			return path, []string{"owned by uid 65534", "mode 0600", "chown 0 " + path}
		}},
		{"file writable by others", func(t *testing.T, dir, path string) (string, []string) {
			must(t, os.Chmod(path, 0o666))
			return path, []string{"writable by group and others", "mode 0666", "chmod go-w " + path}
		}},
		{"file writable by group", func(t *testing.T, dir, path string) (string, []string) {
			must(t, os.Chmod(path, 0o620))
			return path, []string{"writable by group", "mode 0620"}
		}},
		{"data dir owned by another user", func(t *testing.T, dir, path string) (string, []string) {
			must(t, os.Chown(dir, nobody, nobody))
			return dir, []string{"directory " + dir, "owned by uid 65534", "chown 0 " + dir}
		}},
		{"sticky world-writable data dir", func(t *testing.T, dir, path string) (string, []string) {
			must(t, os.Chmod(dir, 0o777|os.ModeSticky))
			return dir, []string{"directory " + dir, "writable by group and others", "mode 1777", "chmod 0755 " + dir}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			path := FilePath(dir, "net1")
			s, err := Open(path, OpenOptions{Create: true})
			must(t, err)
			must(t, s.Close())
			refused, want := c.prepare(t, dir, path)
			before, _ := os.ReadFile(path)
			for _, o := range []OpenOptions{{Create: true}, {}, {ReadOnly: true}} {
				_, err := Open(path, o)
				if !errors.Is(err, ErrUntrusted) || !IsEnvironmentError(err) || IsDamage(err) {
					t.Fatalf("Open(%+v): %v; want ErrUntrusted, an environment error", o, err)
				}
				for _, w := range append(want, refused) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Open(%+v): %q does not say %q", o, err, w)
					}
				}
			}
			if err := CheckTrusted(path); !errors.Is(err, ErrUntrusted) {
				t.Errorf("CheckTrusted: %v", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Errorf("the refused store was written")
			}
		})
	}
}

// A data dir that is a symlink is refused, and nothing is created where it
// points; a missing one is created 0755 by a creating open.
func TestOpenDataDirSymlinkAndCreate(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "real")
	must(t, os.Mkdir(target, 0o755))
	link := filepath.Join(base, "link")
	must(t, os.Symlink(target, link))
	for _, o := range []OpenOptions{{Create: true}, {}, {ReadOnly: true}} {
		_, err := Open(FilePath(link, "net1"), o)
		if !errors.Is(err, ErrUntrusted) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), "directory "+link+" refused: it is a symlink to") {
			t.Errorf("Open(%+v) in a symlinked data dir: %v", o, err)
		}
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("files were created through the data dir's link: %v", entries)
	}
	fresh := filepath.Join(base, "a", "b")
	s, err := Open(FilePath(fresh, "net1"), OpenOptions{Create: true})
	must(t, err)
	s.Close()
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("created data dir: %v %v, want mode 0755", fi.Mode(), err)
	}
	if _, err := Open(FilePath(filepath.Join(base, "none"), "net1"), OpenOptions{}); !IsEnvironmentError(err) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open without Create in a missing data dir: %v, want ENOENT", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
