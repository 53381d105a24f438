package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Paths another user controls: the plugin (run as root) is handed a store,
// data dir, host-local dir or kick file that uid 65534 planted (setpriv), or
// a symlink where a file or directory should be. It never writes through a
// link nor into another user's file, never imports their state, and says
// what it refused: CNI error 5 naming the path, owner, mode and the fix.

// fileState is what a test compares before and after: the bytes, and the
// mtime (a touch changes nothing else).
type fileState struct {
	data  []byte
	mtime time.Time
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{b, fi.ModTime()}
}

func (s fileState) same(o fileState) bool {
	return bytes.Equal(s.data, o.data) && s.mtime.Equal(o.mtime)
}

// wantRefused checks that o is CNI error 5 saying every one of says.
func wantRefused(t *testing.T, what string, o outcome, says ...string) {
	t.Helper()
	if o.Err == nil || o.Err.Code != 5 {
		t.Errorf("%s: %v; want CNI error 5", what, o)
		return
	}
	for _, s := range says {
		if !strings.Contains(o.Err.Msg, s) {
			t.Errorf("%s: %q does not say %q", what, o.Err.Msg, s)
		}
	}
}

// plantedStore makes a healthy store of network holding one allocation (for
// container "planted") and leaves it, readable by everyone, in a scratch dir
// for another user to copy.
func plantedStore(t *testing.T, ctx context.Context, network, subnet string) string {
	t.Helper()
	scratch := testbin.OpenTempDir(t)
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "planted", IfName: "eth0", Netns: "/x"}, ipamConf(t, network, scratch, subnet)); !o.OK() {
		t.Fatalf("ADD into the scratch store: %v", o)
	}
	path := store.FilePath(scratch, network)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The case: in a world-writable (sticky, /tmp-like) data dir, uid
// 65534 plants <net>.db, mode 0666. ADD refuses it (CNI 5, naming the path,
// owner, mode and fix) and writes nothing into it; DEL succeeds without
// reading or writing it (DESIGN: DEL never blocks a sandbox on state it
// cannot use).
func TestTrustForeignStoreInWorldWritableDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	network := "hlt-foreign"
	src := plantedStore(t, ctx, network, "10.86.0.0/24")
	dataDir := testbin.StickyDir(t)
	path := store.FilePath(dataDir, network)
	testbin.AsNobody(t, "cp", src, path)
	testbin.AsNobody(t, "chmod", "0666", path)
	before := stateOf(t, path)
	conf := ipamConf(t, network, dataDir, "10.86.0.0/24")
	c := call{Command: "ADD", ContainerID: "victim", IfName: "eth0", Netns: "/x"}
	wantRefused(t, "ADD in a sticky world-writable data dir", runPlugin(ctx, c, conf),
		"directory "+dataDir, "writable by group and others", "mode 1777", "fix: chmod 0755 "+dataDir)
	c.Command = "DEL"
	if o := runPlugin(ctx, c, conf); !o.OK() {
		t.Errorf("DEL on refused state: %v; want success (nothing released, nothing written)", o)
	}
	if !stateOf(t, path).same(before) {
		t.Errorf("the planted store was written")
	}

	// The same file in a data dir only root can write (an operator's
	// chown/chmod mistake, or a copy): the file itself is refused.
	trusted := testbin.OpenTempDir(t)
	path2 := store.FilePath(trusted, network)
	if err := os.Link(path, path2); err != nil {
		t.Fatal(err)
	}
	c.Command = "ADD"
	wantRefused(t, "ADD from a store owned by uid 65534, mode 0666", runPlugin(ctx, c, ipamConf(t, network, trusted, "10.86.0.0/24")),
		"file "+path2, "owned by uid 65534", "writable by group and others", "mode 0666", "chown 0 "+path2, "chmod go-w "+path2)
	c.Command = "DEL"
	if o := runPlugin(ctx, c, ipamConf(t, network, trusted, "10.86.0.0/24")); !o.OK() {
		t.Errorf("DEL on a refused store: %v", o)
	}
	if !stateOf(t, path).same(before) {
		t.Errorf("the planted store was written")
	}
}

// A data dir another user made (here uid 65534, mode 0755, in a sticky
// /tmp-like directory) is refused: no store, no kick file is created in it;
// STATUS says no ADD can succeed; DEL succeeds.
func TestTrustDataDirOwnedByAnotherUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := filepath.Join(testbin.StickyDir(t), "data")
	testbin.AsNobody(t, "mkdir", "-m", "0755", dataDir)
	conf := ipamConf(t, "hlt-owner", dataDir, "10.87.0.0/24")
	c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}
	wantRefused(t, "ADD in a data dir owned by uid 65534", runPlugin(ctx, c, conf),
		"directory "+dataDir, "owned by uid 65534", "mode 0755", "chown 0 "+dataDir)
	c.Command = "STATUS"
	if o := runPlugin(ctx, c, conf); o.Err == nil || o.Err.Code != 50 || !strings.Contains(o.Err.Msg, "owned by uid 65534") {
		t.Errorf("STATUS with a data dir owned by uid 65534: %v; want 50 naming it (no ADD can succeed)", o)
	}
	c.Command = "DEL"
	if o := runPlugin(ctx, c, conf); !o.OK() {
		t.Errorf("DEL: %v", o)
	}
	if entries, _ := os.ReadDir(dataDir); len(entries) != 0 {
		t.Errorf("files were created in another user's data dir: %v", entries)
	}
}

// The exhaustion kick (<dataDir>/.kick) is never created or touched through
// a symlink: not one uid 65534 planted in a world-writable data dir (the
// data dir is refused before any kick), and not one found in a data dir
// only root can write (the kick refuses the link and logs it).
func TestTrustKickNeverFollowsLink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name     string
		attacker bool // planted by uid 65534 in a sticky data dir
		dangling bool
	}{
		{"planted dangling", true, true},
		{"planted live", true, false},
		{"dangling in a trusted dir", false, true},
		{"live in a trusted dir", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := testbin.OpenTempDir(t)
			if tc.attacker {
				dataDir = testbin.StickyDir(t)
			}
			target := filepath.Join(testbin.OpenTempDir(t), "target")
			var before fileState
			if !tc.dangling {
				if err := os.WriteFile(target, []byte("root's file"), 0o644); err != nil {
					t.Fatal(err)
				}
				old := time.Now().Add(-time.Hour)
				os.Chtimes(target, old, old)
				before = stateOf(t, target)
			}
			kick := filepath.Join(dataDir, ".kick")
			if tc.attacker {
				testbin.AsNobody(t, "ln", "-s", target, kick)
			} else if err := os.Symlink(target, kick); err != nil {
				t.Fatal(err)
			}
			// One address (10.88.0.2 of a /30): the second ADD exhausts it.
			conf := ipamConf(t, "hlt-kick", dataDir, "10.88.0.0/30")
			first := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, conf)
			second := runPlugin(ctx, call{Command: "ADD", ContainerID: "b", IfName: "eth0", Netns: "/x"}, conf)
			if tc.attacker {
				wantRefused(t, "ADD in a sticky data dir", first, "directory "+dataDir, "mode 1777")
				wantRefused(t, "second ADD", second, "directory "+dataDir)
			} else if !first.OK() || second.Err == nil || !strings.Contains(second.Err.Msg, "no IP addresses available") {
				t.Errorf("ADD, ADD on a one-address pool: %v, %v; want success, then exhaustion", first, second)
			}
			if tc.dangling {
				if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the kick created a file at the link's target %s (%v)", target, err)
				}
			} else if !stateOf(t, target).same(before) {
				t.Errorf("the kick touched the link's target %s", target)
			}
			if fi, err := os.Lstat(kick); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link at .kick was replaced: %v %v", fi, err)
			}
		})
	}
}

// Host-local state is imported on a network's first use only when it is
// trusted: a <net> directory another user owns, a <net> directory that is a
// symlink, or a reservation file that is a symlink is refused (CNI 5 naming
// it), and nothing of it is imported: another user could otherwise reserve
// any address or steer the round robin. DEL still succeeds.
func TestTrustHostLocalStateRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const network = "hlt-import"
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dataDir string) []string // returns what the error must say
	}{
		{"net dir owned by uid 65534", func(t *testing.T, dataDir string) []string {
			hl := filepath.Join(dataDir, network)
			if err := os.Mkdir(hl, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(hl, testbin.Nobody, testbin.Nobody); err != nil {
				t.Fatal(err)
			}
			testbin.AsNobody(t, "sh", "-c", `printf 'evil\r\neth0' > "$1/10.89.0.2" && printf 10.89.0.9 > "$1/last_reserved_ip.0"`, "sh", hl)
			return []string{"directory " + hl, "owned by uid 65534", "chown 0 " + hl}
		}},
		{"net dir is a symlink", func(t *testing.T, dataDir string) []string {
			real := filepath.Join(testbin.OpenTempDir(t), network)
			if err := os.Mkdir(real, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(real, "10.89.0.2"), []byte("evil\r\neth0"), 0o644)
			hl := filepath.Join(dataDir, network)
			if err := os.Symlink(real, hl); err != nil {
				t.Fatal(err)
			}
			return []string{"directory " + hl, "symlink"}
		}},
		{"reservation file is a symlink", func(t *testing.T, dataDir string) []string {
			hl := filepath.Join(dataDir, network)
			if err := os.Mkdir(hl, 0o755); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(testbin.OpenTempDir(t), "elsewhere")
			os.WriteFile(target, []byte("evil\r\neth0"), 0o644)
			if err := os.Symlink(target, filepath.Join(hl, "10.89.0.2")); err != nil {
				t.Fatal(err)
			}
			return []string{"file " + filepath.Join(hl, "10.89.0.2"), "symlink"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := testbin.OpenTempDir(t)
			says := tc.plant(t, dataDir)
			conf := ipamConf(t, network, dataDir, "10.89.0.0/24")
			c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}
			wantRefused(t, "first ADD beside untrusted host-local state", runPlugin(ctx, c, conf), says...)
			c.Command = "DEL"
			if o := runPlugin(ctx, c, conf); !o.OK() {
				t.Errorf("DEL beside untrusted host-local state: %v", o)
			}
			if _, err := os.Stat(store.FilePath(dataDir, network)); err == nil {
				for _, r := range readStore(t, store.FilePath(dataDir, network)).Records {
					t.Errorf("the store holds %s for %q (%s): untrusted state was imported or served", r.IP, r.ContainerID, r.Source)
				}
			}
		})
	}
}
