package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// Every audit entry names who acted: a sweep's release of an imported
// host-local reservation whose file host-local's DEL removed is the
// daemon's (hostlease-gc), not the plugin's, so `hostlease-gc audit` and
// the daemon's own reports tell the two apart.
func TestSweepHostLocalReleaseAuditedAsDaemon(t *testing.T) {
	e := newSweepEnv(t)
	hl := writeHostLocal(t, e, "10.1.0.50", "10.1.0.51")
	for _, f := range []string{"10.1.0.50", "10.1.0.51"} {
		e.cri.set("ctr-"+f, reclaim.SandboxReady, addr(f))
	}
	live := e.alloc("sb-live", t0.Add(-time.Hour)) // creates the store
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	e.update(func(tx *store.Tx) error {
		_, err := allocator.ImportHostLocal(tx, hl, testNet, testRanges, t0.Add(-time.Hour))
		return err
	})
	e.sweepAt(t0)
	if err := os.Remove(hl + "/10.1.0.50"); err != nil {
		t.Fatal(err)
	}
	e.cri.remove("ctr-10.1.0.50")
	if nr := e.net(e.sweepAt(t0.Add(time.Second))); len(nr.HostLocalReleased) != 1 {
		t.Fatalf("the sweep released %v, want 10.1.0.50", nr.HostLocalReleased)
	}
	found := false
	for _, ev := range e.audit() {
		if ev.Action != allocator.AuditHostLocalGone {
			continue
		}
		found = true
		if ev.IP != addr("10.1.0.50") || ev.By != allocator.ByDaemon {
			t.Errorf("the daemon's host-local release is audited as %+v, want ip 10.1.0.50 by %q", ev, allocator.ByDaemon)
		}
	}
	if !found {
		t.Errorf("no %s audit entry: %+v", allocator.AuditHostLocalGone, e.audit())
	}
}

// A store exported to host-local stays marked through a rebuild: a rebuild
// during a rollback (the daemon's, of a store damaged meanwhile, or
// `rebuild`) must not make the return skip the merge of what host-local
// did. The rebuilt mark has no stamp, so the next write merges.
func TestRebuildKeepsTheExportMark(t *testing.T) {
	e := newSweepEnv(t)
	r := e.alloc("sb-1", t0.Add(-time.Hour))
	e.cri.set("sb-1", reclaim.SandboxReady, r.IP)
	exported := allocator.HostLocalExport{At: t0.Add(-time.Minute), Seen: allocator.DirStamp{Dev: 1, Ino: 2, Ctime: 3}}
	e.update(func(tx *store.Tx) error { return tx.SetHostLocalExport(exported) })
	list, err := e.cri.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := RebuildStore(context.Background(), e.cri, e.path, testNet, list, testRanges, t0, RebuildAlways, allocator.ByDaemon); err != nil {
		t.Fatal(err)
	}
	e.view(func(tx *store.Tx) error {
		m, ok := tx.HostLocalExport()
		if !ok || !m.At.Equal(exported.At) || m.Seen.Valid() {
			t.Errorf("rebuilt store's export mark: %+v %v, want exported at %v without a stamp", m, ok, exported.At)
		}
		return nil
	})
}
