package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// export, import, list and status (run as root) on paths uid 65534 planted
// (setpriv) or on symlinks: nothing is written through a link or into
// another user's directory, nothing of another user's state is imported,
// and the refusal names the path, owner, mode and fix, with exit status 1.

// rootFile is a file of root's that a planted link points at; it returns
// a check that it is unchanged.
func rootFile(t *testing.T) (string, func(what string)) {
	t.Helper()
	path := filepath.Join(testbin.OpenTempDir(t), "root-file")
	if err := os.WriteFile(path, []byte("root's data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(path, old, old)
	return path, func(what string) {
		t.Helper()
		b, err := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if err != nil || string(b) != "root's data\n" || !fi.ModTime().Equal(old) {
			t.Errorf("%s: the link's target %s was written (%q, %v)", what, path, b, err)
		}
	}
}

func wantExit1(t *testing.T, what string, r result, says ...string) {
	t.Helper()
	if r.code != 1 {
		t.Errorf("%s: want exit 1\n%s", what, r)
	}
	for _, s := range says {
		// status reports a store it cannot read in its row (stdout).
		if !strings.Contains(r.stderr+r.stdout, s) {
			t.Errorf("%s: output does not say %q\n%s", what, s, r)
		}
	}
}

// export into a host-local data dir others can write (sticky, like /tmp),
// where uid 65534 planted the <net> directory as a link, or made it and
// put links at a reservation's name and at the temporary names earlier
// versions wrote through: refused before anything is written.
func TestExportRefusesPlantedPaths(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "trustexp", dataDir: dataDir, rangeSets: subnets("10.91.0.0/29")}
	ip := add(t, n, "sandbox-a")[0].String()
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, hlNet, target string) []string
	}{
		{"net dir is a link", func(t *testing.T, hlNet, target string) []string {
			testbin.AsNobody(t, "ln", "-s", filepath.Dir(target), hlNet)
			return []string{"directory " + hlNet + " refused: it is a symlink"}
		}},
		{"reservation name is a link", func(t *testing.T, hlNet, target string) []string {
			testbin.AsNobody(t, "mkdir", hlNet)
			testbin.AsNobody(t, "ln", "-s", target, filepath.Join(hlNet, ip))
			return []string{"directory " + hlNet, "owned by uid 65534", "chown 0 " + hlNet}
		}},
		{"temporary names are links", func(t *testing.T, hlNet, target string) []string {
			testbin.AsNobody(t, "mkdir", hlNet)
			for _, name := range []string{ip + ".tmp-hostlease", ip + ".tmp-hostlease-gc", "last_reserved_ip.0.tmp-hostlease"} {
				testbin.AsNobody(t, "ln", "-s", target, filepath.Join(hlNet, name))
			}
			return []string{"directory " + hlNet, "owned by uid 65534"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hlBase := testbin.StickyDir(t)
			hlNet := filepath.Join(hlBase, n.name)
			target, unchanged := rootFile(t)
			says := tc.plant(t, hlNet, target)
			r := gcExec(t, "export", "--data-dir", dataDir, "--network", n.name, "--host-local-dir", hlBase)
			wantExit1(t, "export", r, says...)
			unchanged("export")
			if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 1 {
				t.Errorf("export created files beside the link's target: %v", entries)
			}
		})
	}
}

// In a host-local directory only root can write, links left at a
// reservation's name or at the temporary names earlier versions used are
// never written through: the reservation replaces the link at its own name,
// and temporary names are new random ones.
func TestExportNeverWritesThroughLinks(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "trustexp2", dataDir: dataDir, rangeSets: subnets("10.92.0.0/29")}
	ip := add(t, n, "sandbox-a")[0].String()
	hlNet := filepath.Join(dataDir, n.name)
	if err := os.Mkdir(hlNet, 0o755); err != nil {
		t.Fatal(err)
	}
	target, unchanged := rootFile(t)
	stale := []string{ip + ".tmp-hostlease", ip + ".tmp-hostlease-gc", "last_reserved_ip.0.tmp-hostlease"}
	for _, name := range append(stale, ip) {
		if err := os.Symlink(target, filepath.Join(hlNet, name)); err != nil {
			t.Fatal(err)
		}
	}
	if r := gcExec(t, "export", "--data-dir", dataDir, "--network", n.name); r.code != 0 {
		t.Fatalf("export: %s", r)
	}
	unchanged("export")
	fi, err := os.Lstat(filepath.Join(hlNet, ip))
	if b, _ := os.ReadFile(filepath.Join(hlNet, ip)); err != nil || !fi.Mode().IsRegular() || string(b) != "sandbox-a\r\neth0" {
		t.Errorf("reservation file %s: %v %v %q; want a regular file of sandbox-a", ip, fi, err, b)
	}
	for _, name := range stale {
		if fi, err := os.Lstat(filepath.Join(hlNet, name)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s: %v %v; the link should be left as it was", name, fi, err)
		}
	}
}

// import of host-local state uid 65534 controls: a <net> directory it owns
// (with a reservation that would take an address from the pool), or a link
// it planted at <net>: refused, and no store is created.
func TestImportRefusesPlantedState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, hlNet string) []string
	}{
		{"net dir owned by uid 65534", func(t *testing.T, hlNet string) []string {
			testbin.AsNobody(t, "mkdir", hlNet)
			testbin.AsNobody(t, "sh", "-c", `printf 'evil\r\neth0' > "$1/10.93.0.2"`, "sh", hlNet)
			return []string{"directory " + hlNet, "owned by uid 65534", "mode 0755", "chown 0 " + hlNet}
		}},
		{"net dir is a link", func(t *testing.T, hlNet string) []string {
			real := filepath.Join(testbin.OpenTempDir(t), "real")
			if err := os.Mkdir(real, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(real, "10.93.0.2"), []byte("evil\r\neth0"), 0o644)
			testbin.AsNobody(t, "ln", "-s", real, hlNet)
			return []string{"directory " + hlNet + " refused: it is a symlink"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			hlBase := testbin.StickyDir(t)
			hlNet := filepath.Join(hlBase, "trustimp")
			says := tc.plant(t, hlNet)
			r := gcExec(t, "import", "--data-dir", dataDir, "--network", "trustimp", "--host-local-dir", hlBase)
			wantExit1(t, "import", r, says...)
			if _, err := os.Lstat(store.FilePath(dataDir, "trustimp")); err == nil {
				t.Errorf("import created a store from refused state")
			}
		})
	}
}

// list and status refuse a store uid 65534 owns (mode 0666) and a data dir
// others can write, naming the fix, with exit status 1; nothing is written.
func TestListStatusRefuseForeignStore(t *testing.T) {
	dataDir := testbin.OpenTempDir(t)
	n := ipamNet{name: "trustlist", dataDir: dataDir, rangeSets: subnets("10.94.0.0/29")}
	add(t, n, "sandbox-a")
	path := store.FilePath(dataDir, n.name)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(testbin.OpenTempDir(t), "copy.db")
	if err := os.Rename(path, planted); err != nil {
		t.Fatal(err)
	}
	sticky := testbin.StickyDir(t)
	testbin.AsNobody(t, "cp", planted, filepath.Join(sticky, "trustlist.db"))
	testbin.AsNobody(t, "chmod", "0666", filepath.Join(sticky, "trustlist.db"))
	// The file (owned by 65534, 0666) moved by root into the trusted data dir.
	if err := os.Rename(filepath.Join(sticky, "trustlist.db"), path); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, cmd := range []string{"list", "status"} {
		wantExit1(t, cmd, gcExec(t, cmd, "--data-dir", dataDir),
			"file "+path, "owned by uid 65534", "mode 0666", "chown 0 "+path)
	}
	if r := gcExec(t, "release", "--data-dir", dataDir, "--network", n.name, "--sandbox", "sandbox-a", "--yes"); r.code == 0 {
		t.Errorf("release from a refused store succeeded:\n%s", r)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("a refused store was written")
	}
	if err := os.Chmod(dataDir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	wantExit1(t, "list in a sticky world-writable data dir", gcExec(t, "list", "--data-dir", dataDir),
		"directory "+dataDir, "mode 1777", "chmod 0755 "+dataDir)
}
