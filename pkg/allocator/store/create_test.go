package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Network names as long as host-local takes (a file name) have a store file
// and temporary names within NAME_MAX; the mapping is deterministic.
func TestLongNetworkNames(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]string{}
	for _, n := range []int{1, 240, 252, 253, 254, 255} {
		name := strings.Repeat("n", n-1) + "x"
		if n == 255 {
			name = strings.Repeat("m", 254) + "x"
		}
		path := FilePath(dir, name)
		base := filepath.Base(path)
		if len(base) > nameMax {
			t.Fatalf("name of %d bytes: store file %q has %d bytes", n, base, len(base))
		}
		if n <= 252 && base != name+".db" {
			t.Errorf("name of %d bytes: store file %q, want %s.db", n, base, name)
		}
		if FilePath(dir, name) != path {
			t.Error("StorePath is not deterministic")
		}
		if other, ok := seen[base]; ok {
			t.Errorf("%q and %q share the store file %s", name, other, base)
		}
		seen[base] = name
		if p := tempPrefix(base); len(p)+16 > nameMax {
			t.Errorf("temporary name prefix %q too long", p)
		}
		s, err := Open(path, OpenOptions{Create: true, LockTimeout: time.Second})
		if err != nil {
			t.Fatalf("Open of a store for a %d-byte network name: %v", n, err)
		}
		update(t, s, func(tx *Tx) error { return tx.SetNetwork(name) })
		view(t, s, func(tx *Tx) error {
			if tx.Network() != name {
				t.Errorf("Network() = %q", tx.Network())
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

// Temporary files of a first use killed midway are removed once old enough;
// young ones (a creator at work) and other files are kept.
func TestCleanStaleTemp(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * StaleTempAge)
	files := map[string]bool{ // name -> removed
		tempPrefix("net1.db") + "123456":   true,
		".net1.db.new-3847561":             true, // an earlier version's name
		tempPrefix("net2.db") + "999":      false,
		"net1.db":                          false,
		".kick":                            false,
		".net1.db.new-x":                   false,
		"notes.new-1":                      false,
		tempPrefix("net3.db") + "77-young": false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(name, "young") && name != tempPrefix("net2.db")+"999" {
			os.Chtimes(filepath.Join(dir, name), old, old)
		}
	}
	// net2's temp file is young; "x" and "notes" do not match.
	removed, err := CleanStaleTemp(dir, StaleTempAge, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := errors.Is(err, os.ErrNotExist); gone != want {
			t.Errorf("%s: removed = %v, want %v", name, gone, want)
		}
	}
	if len(removed) != 2 {
		t.Errorf("removed %v", removed)
	}
	// First use of a network cleans too.
	stale := filepath.Join(dir, tempPrefix("net4.db")+"1")
	os.WriteFile(stale, nil, 0o600)
	os.Chtimes(stale, old, old)
	s, err := Open(FilePath(dir, "net4"), OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("first use left the stale temporary file: %v", err)
	}
}
