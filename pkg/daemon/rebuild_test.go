package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
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
	e.cri.set("sb-ready", reclaim.SandboxReady, ready.IP)
	e.cri.set("sb-stopped", reclaim.SandboxNotReady, stopped.IP)
	e.cri.set("sb-inflight", reclaim.SandboxUnknown)
	damageRecord(t, e.path, broken.IP.As4())

	list, err := e.cri.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	aside, n, err := RebuildStore(context.Background(), e.cri, e.path, testNet, list, testRanges, now, RebuildDamaged, allocator.ByCLI("rebuild"))
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
	hl := writeHostLocal(t, e, "10.1.0.50", "10.1.0.51")
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
	if got := e.reclaims(reclaim.ReleaseHostLocalGone); got != 1 {
		t.Fatalf("reclaims{host_local_gone} = %v", got)
	}
}

// A lost derived index (here the owner index emptied) is found by the sweep's
// verification and rebuilt from the records, reported once.
func TestSweepRepairsLostIndex(t *testing.T) {
	e := newSweepEnv(t)
	live := e.alloc("sb-live", t0.Add(-time.Hour))
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
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
	if got := e.metric("hostlease_index_repairs_total", "network", testNet); got != 1 {
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

func TestSweepRebuildsUnreadableStore(t *testing.T) {
	small := []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: addr("10.1.0.10"), End: addr("10.1.0.13"), Gateway: addr("10.1.0.1"),
	}}}}
	corruptions := []struct {
		name string
		do   func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			b := fileBytes(t, path)
			for i := range b {
				b[i] = byte(i*7 + 3)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			// The meta pages survive; the pages they point at do not.
			if err := os.Truncate(path, 3*4096); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			e := newSweepEnv(t)
			e.ranges = small
			created := t0.Add(-time.Hour)
			a := e.alloc("sb-a", created)  // .10 READY
			e.alloc("sb-b", created)       // .11 leaked: its sandbox is gone
			cc := e.alloc("sb-c", created) // .12 READY
			d := e.alloc("sb-d", created)  // .13 NOTREADY
			e.cri.set("sb-a", reclaim.SandboxReady, a.IP)
			e.cri.set("sb-c", reclaim.SandboxReady, cc.IP, addr("fd00::c")) // plus an address of another network
			e.cri.set("sb-d", reclaim.SandboxNotReady, d.IP)
			e.cri.set("sb-x", reclaim.SandboxReady, addr("192.168.7.7")) // a pod on another network
			if rep := e.sweepAt(t0); rep.Result != SweepOK {
				t.Fatalf("first sweep: %s", rep.Result)
			}

			c.do(t, e.path)
			damaged := fileBytes(t, e.path)
			now := t0.Add(time.Minute)
			rep := e.sweepAt(now)
			nr := e.net(rep)
			aside := fmt.Sprintf("%s.corrupt-%d", e.path, now.Unix())
			if nr.Rebuilt != aside || nr.Err() != nil {
				t.Fatalf("rebuilt=%q err=%v, want set aside as %s", nr.Rebuilt, nr.Err(), aside)
			}
			if !bytes.Equal(fileBytes(t, aside), damaged) {
				t.Fatal("the set-aside file is not the unreadable store as it was")
			}
			recs := e.records()
			if len(recs) != 3 || recs[a.IP] == nil || recs[cc.IP] == nil || recs[d.IP] == nil {
				t.Fatalf("rebuilt store holds %v, want exactly the READY sandboxes' %s and %s and the NOTREADY one's %s", keys(recs), a.IP, cc.IP, d.IP)
			}
			for _, r := range recs {
				if r.State != allocator.StateCommitted || r.Source != "rebuild" || r.RangeSet != 0 || r.PodUID != "uid-"+r.ContainerID ||
					r.PrefixLen != 24 || r.Gateway != addr("10.1.0.1") {
					t.Errorf("rebuilt record %+v", r)
				}
			}
			if recs[a.IP].ContainerID != "sb-a" || recs[cc.IP].ContainerID != "sb-c" {
				t.Errorf("rebuilt owners: %s=%s %s=%s", a.IP, recs[a.IP].ContainerID, cc.IP, recs[cc.IP].ContainerID)
			}
			var sawRebuild bool
			for _, ev := range e.audit() {
				sawRebuild = sawRebuild || ev.Action == "rebuild"
			}
			if !sawRebuild {
				t.Error("no rebuild entry in the new store's audit log")
			}
			if got := e.metric("hostlease_stores_rebuilt_total", "network", testNet); got != 1 {
				t.Errorf("stores_rebuilt_total = %v, want 1", got)
			}
			if got := e.metric("hostlease_pool_size_addresses", "network", testNet, "range_set", "0"); got != 4 {
				t.Errorf("pool size after rebuild = %v, want 4 (the cached range set)", got)
			}

			// The plugin serves from the rebuilt store: it must never hand out
			// an address a READY sandbox holds (.10, .12) nor the one the
			// NOTREADY sandbox still reports (.13: its pod is stopped, not
			// gone). Only the leaked .11 is free again.
			owner := func(id string) allocator.Owner { return allocator.Owner{ContainerID: id, IfName: "eth0"} }
			inUse := map[netip.Addr]bool{a.IP: true, cc.IP: true, d.IP: true}
			got := map[netip.Addr]bool{}
			for i := range 2 {
				recs, cerr := e.tryAlloc(owner(fmt.Sprintf("new-%d", i)), now)
				if cerr != nil {
					if cerr.Code != allocator.ErrRangeExhausted || i != 1 {
						t.Fatalf("ADD %d on the rebuilt store: %v", i, cerr)
					}
					break
				}
				if inUse[recs[0].IP] || got[recs[0].IP] {
					t.Fatalf("ADD %d on the rebuilt store got %s, which is in use", i, recs[0].IP)
				}
				got[recs[0].IP] = true
			}
			if len(got) != 1 {
				t.Fatalf("ADDs on the rebuilt store got %v, want the one free address", got)
			}
			// And the daemon keeps sweeping the rebuilt store normally.
			if rep := e.sweepAt(now.Add(time.Minute)); rep.Result != SweepOK || e.net(rep).Rebuilt != "" {
				t.Fatalf("sweep after rebuild: %s rebuilt %q", rep.Result, e.net(rep).Rebuilt)
			}
		})
	}

	t.Run("not without a complete CRI answer", func(t *testing.T) {
		e := newSweepEnv(t)
		a := e.alloc("sb-a", t0.Add(-time.Hour))
		e.cri.set("sb-a", reclaim.SandboxReady, a.IP)
		e.sweepAt(t0)
		if err := os.Truncate(e.path, 0); err != nil {
			t.Fatal(err)
		}
		e.cri.setListErr(errors.New("unavailable"))
		rep := e.sweepAt(t0.Add(time.Minute))
		if nr := e.net(rep); nr.Rebuilt != "" || !errors.Is(nr.Err(), store.ErrUnreadable) {
			t.Fatalf("rebuilt=%q err=%v, want left unreadable", nr.Rebuilt, nr.Err())
		}
		if matches, _ := filepath.Glob(e.path + ".corrupt-*"); len(matches) != 0 {
			t.Fatalf("set aside without a CRI answer: %v", matches)
		}
		if fi, err := os.Stat(e.path); err != nil || fi.Size() != 0 {
			t.Fatalf("unreadable store was touched: %v %v", fi, err)
		}
		// CRI is back: rebuilt now.
		e.cri.setListErr(nil)
		if rep := e.sweepAt(t0.Add(2 * time.Minute)); e.net(rep).Rebuilt == "" {
			t.Fatalf("not rebuilt once CRI answered: %v", e.net(rep).Err())
		}
		if recs := e.records(); len(recs) != 1 || recs[a.IP] == nil {
			t.Fatalf("rebuilt store %v", keys(recs))
		}
	})
}

// RebuildStore judges the store it locked, not the one its caller read: a
// store that no longer needs the rebuild asked for (another daemon or the
// CLI rebuilt it meanwhile) is left as it is, with ErrNotRebuilt and nothing
// set aside; one that does is rebuilt.
func TestRebuildJudgedUnderTheLock(t *testing.T) {
	healthy := func(*testing.T, string, [4]byte) {}
	cut := func(t *testing.T, path string, _ [4]byte) {
		if err := os.Truncate(path, 8192); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		damage  func(*testing.T, string, [4]byte)
		when    RebuildWhen
		rebuilt bool
	}{
		{"healthy, the daemon's rule", healthy, RebuildUnreadable, false},
		{"healthy, without --force", healthy, RebuildDamaged, false},
		{"healthy, --force", healthy, RebuildAlways, true},
		{"a damaged record, the daemon's rule", damageRecord, RebuildUnreadable, false},
		{"a damaged record, without --force", damageRecord, RebuildDamaged, true},
		{"cut short, the daemon's rule", cut, RebuildUnreadable, true},
		{"cut short, without --force", cut, RebuildDamaged, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newSweepEnv(t)
			r := e.alloc("sb-1", t0.Add(-time.Hour))
			e.alloc("sb-2", t0.Add(-time.Hour))
			c.damage(t, e.path, r.IP.As4())
			before, err := os.ReadFile(e.path)
			if err != nil {
				t.Fatal(err)
			}
			aside, _, err := RebuildStore(context.Background(), e.cri, e.path, testNet, nil, testRanges, t0, c.when, allocator.ByDaemon)
			asides, _ := filepath.Glob(e.path + ".corrupt-*")
			if !c.rebuilt {
				after, _ := os.ReadFile(e.path)
				if !errors.Is(err, ErrNotRebuilt) || len(asides) != 0 || !bytes.Equal(before, after) {
					t.Fatalf("RebuildStore = %v, set aside %v, store changed %v; want ErrNotRebuilt and the store left as it is", err, asides, !bytes.Equal(before, after))
				}
				return
			}
			if err != nil || len(asides) != 1 || asides[0] != aside {
				t.Fatalf("RebuildStore = %q, %v; set aside %v; want one set-aside file", aside, err, asides)
			}
		})
	}
}
