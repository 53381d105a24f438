package store

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// Helpers that run the allocation policy (package allocator) on a real
// store: the store's tests prove that the policy's writes keep the derived
// indexes in step and that damage never loses an allocation.

var testTime = time.Unix(1700000000, 0).UTC()

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

type allocResult struct {
	recs []*allocator.Record
	err  *types.Error
}

// alloc runs one ADD in its own transaction, committed even on failure as
// cmd/ipam does.
func alloc(t *testing.T, s *Store, sets []allocator.StoredRangeSet, id, ifname string, requested ...string) allocResult {
	t.Helper()
	req := allocator.AllocateRequest{Network: "net1", RangeSets: sets, Now: testTime,
		Owner: allocator.Owner{ContainerID: id, IfName: ifname, Netns: "/var/run/netns/" + id}}
	for _, r := range requested {
		req.Requested = append(req.Requested, netip.MustParseAddr(r))
	}
	var res allocResult
	update(t, s, func(tx *Tx) error {
		res.recs, res.err = allocator.Allocate(tx, req)
		return nil
	})
	return res
}

// mustGet allocates and fails the test on error.
func mustGet(t *testing.T, s *Store, sets []allocator.StoredRangeSet, id string, requested ...string) []string {
	t.Helper()
	r := alloc(t, s, sets, id, "eth0", requested...)
	if r.err != nil {
		t.Fatalf("ADD %s: %v", id, r.err)
	}
	return ips(r.recs)
}

func release(t *testing.T, s *Store, id, ifname string) []string {
	t.Helper()
	var recs []*allocator.Record
	update(t, s, func(tx *Tx) error {
		var err error
		recs, err = allocator.Release(tx, allocator.Attachment{ContainerID: id, IfName: ifname}, allocator.Why{Reason: "DEL", By: "plugin"}, testTime)
		return err
	})
	return ips(recs)
}

func held(t *testing.T, s *Store, id, ifname string) []string {
	t.Helper()
	var recs []*allocator.Record
	view(t, s, func(tx *Tx) error {
		var err error
		recs, err = allocator.AttachmentRecords(tx, allocator.Attachment{ContainerID: id, IfName: ifname})
		return err
	})
	return ips(recs)
}

func (r allocResult) ips() []string { return ips(r.recs) }

// TestPolicyKeepsIndexes: what the allocation policy writes through Tx
// (ADD, DEL, the GC verb, a host-local import) leaves the owner index in step
// with the records, and the imported index listing exactly the records
// imported from host-local.
func TestPolicyKeepsIndexes(t *testing.T) {
	s := newStore(t)
	check := func(when string) {
		t.Helper()
		view(t, s, func(tx *Tx) error {
			checkIndex(t, tx)
			if r := tx.VerifyIndexes(); r.Changed() {
				t.Errorf("%s: indexes disagree with the records: %s", when, r)
			}
			return nil
		})
	}
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4, rangetest.Set6}, id)
	}
	check("after ADDs")
	eq(t, "DEL c2", release(t, s, "c2", "eth0"), []string{"10.0.0.3", "fd00::3"})
	check("after a DEL")
	update(t, s, func(tx *Tx) error {
		_, err := allocator.GarbageCollect(tx, []allocator.Attachment{{ContainerID: "c1", IfName: "eth0"}}, testTime)
		return err
	})
	eq(t, "after GC", held(t, s, "c3", "eth0"), []string{})
	check("after GC")

	dir := filepath.Join(t.TempDir(), "net1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"10.0.0.5": "hl1\r\neth0", "10.0.0.6": "hl2"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	update(t, s, func(tx *Tx) error {
		_, err := allocator.ImportHostLocal(tx, dir, "net1", []allocator.StoredRangeSet{rangetest.Set4}, testTime)
		return err
	})
	check("after an import")
	view(t, s, func(tx *Tx) error {
		recs, err := tx.Records(allocator.Query{Imported: true})
		eq(t, "imported records", ips(recs), []string{"10.0.0.5", "10.0.0.6"})
		n := 0
		tx.imported.ForEach(func(_, _ []byte) error { n++; return nil })
		eq(t, "imported index entries", n, 2)
		return err
	})
	eq(t, "DEL an imported record", release(t, s, "hl1", "eth0"), []string{"10.0.0.5"})
	check("after releasing an imported record")
	view(t, s, func(tx *Tx) error {
		recs, err := tx.Records(allocator.Query{Imported: true})
		eq(t, "imported records after the release", ips(recs), []string{"10.0.0.6"})
		return err
	})
}

// TestAllocatedRecordReadsBack: the records ADD returns are what the store
// then holds, field for field (the codec writes every field the policy sets),
// and the round-robin point and range sets are stored with them.
func TestAllocatedRecordReadsBack(t *testing.T) {
	s := newStore(t)
	req := allocator.AllocateRequest{Network: "net1", RangeSets: []allocator.StoredRangeSet{rangetest.Set4, rangetest.Set6}, Now: testTime,
		Owner: allocator.Owner{ContainerID: "abc", IfName: "eth1", Netns: "/var/run/netns/abc", PodNamespace: "ns", PodName: "pod-abc", PodUID: "uid-abc"}}
	var got []*allocator.Record
	update(t, s, func(tx *Tx) error {
		var cerr *types.Error
		if got, cerr = allocator.Allocate(tx, req); cerr != nil {
			return cerr
		}
		return nil
	})
	eq(t, "addresses", ips(got), []string{"10.0.0.2", "fd00::2"})
	view(t, s, func(tx *Tx) error {
		for _, r := range got {
			stored, err := tx.Get(r.IP)
			if err != nil || stored == nil {
				t.Fatalf("stored record %s: %v %v", r.IP, stored, err)
			}
			sameRecord(t, "stored record "+r.IP.String(), stored, r)
			if stored.Version != binaryFormat {
				t.Errorf("stored record %s: format %d, want %d", r.IP, stored.Version, binaryFormat)
			}
		}
		sets, err := tx.RangeSets()
		eq(t, "stored range sets", sets, req.RangeSets)
		eq(t, "stored network", tx.Network(), "net1")
		last, _ := tx.LastReserved(1)
		eq(t, "last reserved in range set 1", last.String(), "fd00::2")
		return err
	})
}
