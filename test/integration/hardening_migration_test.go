package integration

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// After a switch from host-local, podman tears containers down with its
// cached host-local config: the real host-local's DEL removes its file, and
// the next hostlease ADD releases that imported record (audited), and only it.
func TestHardeningHostLocalMigrationLeak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hlBin := filepath.Join(binDir, "host-local") // built by TestMain
	dir := t.TempDir()
	network := "hlh-podman"
	conf := ipamConf(t, network, dir, "10.85.0.0/24")
	hostLocalConf := bytes.Replace(conf, []byte(`"type":"hostlease"`), []byte(`"type":"host-local"`), 1)
	hostLocal := func(cmd, id string) {
		t.Helper()
		c := exec.CommandContext(ctx, hlBin)
		c.Env = call{Command: cmd, ContainerID: id, IfName: "eth0", Netns: "/x"}.env()
		c.Stdin = bytes.NewReader(hostLocalConf)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("host-local %s %s: %v\n%s", cmd, id, err, out)
		}
	}
	for _, id := range []string{"podA", "podB", "podC"} {
		hostLocal("ADD", id)
	}
	add := func(id string) {
		t.Helper()
		if o := runPlugin(ctx, call{Command: "ADD", ContainerID: id, IfName: "eth0", Netns: "/x"}, conf); !o.OK() {
			t.Fatalf("ADD %s: %v", id, o)
		}
	}
	add("new1") // the switch: imports podA, podB, podC
	path := store.FilePath(dir, network)
	if n := len(readStoreLenient(t, path).records); n != 4 {
		t.Fatalf("after the import the store holds %d records, want 4", n)
	}
	hostLocal("DEL", "podB") // podman, with its cached host-local config
	add("new2")
	snap := readStoreLenient(t, path)
	var held []string
	for _, r := range snap.records {
		held = append(held, r.ContainerID)
	}
	slices.Sort(held)
	if !slices.Equal(held, []string{"new1", "new2", "podA", "podC"}) {
		t.Errorf("store holds %v; want podB's imported record released", held)
	}
	if !slices.ContainsFunc(snap.audit, func(e allocator.AuditEvent) bool {
		return e.Action == allocator.AuditHostLocalGone && e.ContainerID == "podB"
	}) {
		t.Errorf("no %s audit event for podB: %v", allocator.AuditHostLocalGone, snap.audit)
	}
	checkIntegrity(t, readStore(t, path))
}
