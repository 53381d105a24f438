package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Store paths: a symlinked store, a long network name, stale temporary files.

// A symlink in place of <net>.db is never followed: nothing is created at
// its target; ADD fails naming it, DEL of a dangling one exits 0.
func TestHardeningSymlinkStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	network := "hlh-link"
	conf := ipamConf(t, network, dir, "10.82.0.0/24")
	target := filepath.Join(t.TempDir(), "elsewhere.db")
	path := store.FilePath(dir, network)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/var/run/netns/a"}
	o := runPlugin(ctx, c, conf)
	if o.Err == nil || o.Err.Code != 5 || !strings.Contains(o.Err.Msg, path) || !strings.Contains(o.Err.Msg, "symlink") {
		t.Errorf("ADD with a dangling symlink at the store path: %v; want CNI 5 naming it", o)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was created at the symlink's target %s", target)
	}
	c.Command = "DEL"
	if o := runPlugin(ctx, c, conf); !o.OK() {
		t.Errorf("DEL with a dangling symlink at the store path: %v", o)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v", err)
	}
}

// A network name of 240 characters works as with host-local; one too long
// for "<name>.db" gets a shortened, deterministic store file name.
func TestHardeningLongNetworkName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []int{240, 252, 255} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			network := "l" + strings.Repeat("o", n-2) + "g"
			dir := t.TempDir()
			conf := ipamConf(t, network, dir, "10.83.0.0/24")
			c := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/var/run/netns/a"}
			for _, cmd := range []string{"ADD", "CHECK", "DEL"} {
				c.Command = cmd
				if o := runPlugin(ctx, c, conf); !o.OK() {
					t.Fatalf("%s on a %d-character network name: %v", cmd, n, o)
				}
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 || len(entries[0].Name()) > 255 {
				t.Fatalf("data dir holds %v", entries)
			}
			if n <= 252 && entries[0].Name() != network+".db" {
				t.Errorf("store file %s, want %s.db", entries[0].Name(), network)
			}
			if filepath.Join(dir, entries[0].Name()) != store.FilePath(dir, network) {
				t.Errorf("store file %s is not StorePath's", entries[0].Name())
			}
		})
	}
}

// Temporary files a first use killed with SIGKILL left behind are removed by
// the next first use once they are old enough.
func TestHardeningStaleTempFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	network := "hlh-tmp"
	conf := ipamConf(t, network, dir, "10.84.0.0/24")
	old := time.Now().Add(-time.Hour)
	stale := []string{"." + network + ".db.new-2816350431", ".new-0123456789abcdef-998877"}
	for _, name := range stale {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	young := filepath.Join(dir, ".new-fedcba9876543210-1")
	os.WriteFile(young, nil, 0o600)
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, conf); !o.OK() {
		t.Fatalf("ADD: %v", o)
	}
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale temporary file %s left in place (%v)", name, err)
		}
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a temporary file younger than %s was removed: %v", store.StaleTempAge, err)
	}
}
