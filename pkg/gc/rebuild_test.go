package gc

import (
	"context"
	"os"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// damageRecord overwrites the stored value of ip's record with bytes that do
// not decode (bbolt still opens the file).
func damageRecord(t *testing.T, path string, ip4 [4]byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("allocs")).Put([]byte{4, ip4[0], ip4[1], ip4[2], ip4[3]}, []byte{0xff, 0x01})
	}); err != nil {
		t.Fatal(err)
	}
}

// A rebuild of a store that opens but holds a damaged record keeps every
// record that still decodes, also of sandboxes the runtime does not list (a
// leak or an ADD in flight: the reclaim rules tell them apart, not the
// rebuild), keeps the damaged record's address reserved, takes the runtime's
// READY and NOTREADY sandboxes, and never hands any of those out again.
func TestRebuildLogicallyDamagedStore(t *testing.T) {
	e := newSweepEnv(t)
	created := t0.Add(-time.Hour)
	ready := e.alloc("sb-ready", created)       // .10
	inflight := e.alloc("sb-inflight", created) // .11 pending, its sandbox UNKNOWN (no status)
	broken := e.alloc("sb-broken", created)     // .12 will not decode
	stopped := e.alloc("sb-stopped", created)   // .13
	gone := e.alloc("sb-gone", created)         // .14 the runtime no longer lists it
	e.cri.set("sb-ready", SandboxReady, ready.IP)
	e.cri.set("sb-stopped", SandboxNotReady, stopped.IP)
	e.cri.set("sb-inflight", SandboxUnknown)
	damageRecord(t, e.path, broken.IP.As4())

	list, err := e.cri.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	aside, n, err := RebuildStore(context.Background(), e.cri, e.path, testNet, list, testRanges, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(aside); err != nil {
		t.Fatalf("old store not kept: %v", err)
	}
	recs := e.records()
	if n != 5 || len(recs) != 5 {
		t.Fatalf("rebuilt %d records: %v, want 5", n, keys(recs))
	}
	if r := recs[inflight.IP]; r.ContainerID != "sb-inflight" || r.State != allocator.StatePending || !r.Created.Equal(created) {
		t.Errorf("record of a listed sandbox not kept as it was: %+v", r)
	}
	if r := recs[gone.IP]; r == nil || r.ContainerID != "sb-gone" || !r.Created.Equal(created) {
		t.Errorf("record of a sandbox the runtime does not list not kept as it was: %+v", r)
	}
	if r := recs[broken.IP]; r == nil || r.Source != "rebuild-damaged" {
		t.Errorf("damaged record's address not kept reserved: %+v", r)
	}
	if r := recs[stopped.IP]; r.ContainerID != "sb-stopped" {
		t.Errorf("NOTREADY sandbox's address: %+v", r)
	}
	if r := recs[ready.IP]; r.ContainerID != "sb-ready" || r.State != allocator.StateCommitted {
		t.Errorf("READY sandbox's address: %+v", r)
	}
	for i := range 3 {
		got, cerr := e.tryAlloc(allocator.Owner{ContainerID: "new", IfName: "eth0"}, now)
		if cerr != nil {
			t.Fatal(cerr)
		}
		if recs[got[0].IP] != nil {
			t.Fatalf("ADD %d after the rebuild got %s, which is held", i, got[0].IP)
		}
		e.release("new", now)
	}
}

// A record imported from host-local whose reservation file has been removed
// (host-local's DEL, by a runtime with a cached host-local config) is
// released by the next sweep; the others stay.
func TestSweepReleasesVanishedHostLocal(t *testing.T) {
	e := newSweepEnv(t)
	hl := e.s.hostLocalDir(testNet)
	if err := os.MkdirAll(hl, 0o755); err != nil {
		t.Fatal(err)
	}
	// host-local keeps a lock file in its dir on every call; its DEL leaves it.
	if err := os.WriteFile(hl+"/lock", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"10.1.0.50", "10.1.0.51"} {
		if err := os.WriteFile(hl+"/"+f, []byte("ctr-"+f+"\r\neth0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.alloc("sb-live", t0.Add(-time.Hour)) // creates the store
	e.update(func(tx *store.Tx) error {
		_, err := allocator.ImportHostLocal(tx, hl, testNet, testRanges, t0.Add(-time.Hour))
		return err
	})
	if rep := e.sweepAt(t0); len(e.net(rep).HostLocalReleased) != 0 {
		t.Fatal("released with every file present")
	}
	if err := os.Remove(hl + "/10.1.0.50"); err != nil {
		t.Fatal(err)
	}
	nr := e.net(e.sweepAt(t0.Add(time.Second)))
	if len(nr.HostLocalReleased) != 1 || nr.HostLocalReleased[0].IP != addr("10.1.0.50") {
		t.Fatalf("released %v, want 10.1.0.50", nr.HostLocalReleased)
	}
	recs := e.records()
	if recs[addr("10.1.0.50")] != nil || recs[addr("10.1.0.51")] == nil {
		t.Fatalf("store: %v", keys(recs))
	}
	if got := e.reclaims(ReclaimHostLocalGone); got != 1 {
		t.Fatalf("reclaims{host_local_gone} = %v", got)
	}
}

// A lost derived index (here the owner index emptied) is found by the sweep's
// verification and rebuilt from the records, reported once.
func TestSweepRepairsLostIndex(t *testing.T) {
	e := newSweepEnv(t)
	live := e.alloc("sb-live", t0.Add(-time.Hour))
	e.cri.set("sb-live", SandboxReady, live.IP)
	e.alloc("sb-other", t0.Add(-time.Hour))
	db, err := bolt.Open(e.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("ownerhash"))
		var keys [][]byte
		_ = b.ForEach(func(k, _ []byte) error { keys = append(keys, append([]byte(nil), k...)); return nil })
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	nr := e.net(e.sweepAt(t0))
	if !nr.IndexRepair.Changed() || nr.IndexRepair.OwnerAdded != 2 {
		t.Fatalf("index repair %+v, want the 2 owner entries added", nr.IndexRepair)
	}
	if got := e.metric(e.m.IndexRepairs.WithLabelValues(testNet)); got != 1 {
		t.Fatalf("index_repairs_total = %v", got)
	}
	// Repaired: the plugin's DEL finds its record by owner again.
	e.release("sb-other", t0.Add(time.Second))
	if len(e.records()) != 1 {
		t.Fatalf("DEL after the repair left %v", keys(e.records()))
	}
	var ok bool
	e.view(func(tx *store.Tx) error { ok = !tx.VerifyIndexes().Changed(); return nil })
	if !ok {
		t.Fatal("indexes still disagree with the records")
	}
}
