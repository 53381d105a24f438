package bench

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Opening an initialised store read-write must not write it: every plugin
// call opens the store, and a commit costs two fdatasyncs. (A property of the
// code path, not a timing.)
func TestOpenInitialisedStoreWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net.db")
	open := func() *store.Store {
		t.Helper()
		s, err := store.Open(path, store.OpenOptions{Create: true, LockTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	set := allocator.StoredRangeSet{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: netip.MustParseAddr("10.0.0.2"),
		End: netip.MustParseAddr("10.0.0.254"), Gateway: netip.MustParseAddr("10.0.0.1"),
	}}}
	err := s.Update(func(tx *store.Tx) error {
		_, cerr := allocator.Allocate(tx, allocator.AllocateRequest{
			Network: "net", RangeSets: []allocator.StoredRangeSet{set},
			Owner: allocator.Owner{ContainerID: "c1", IfName: "eth0"}, Now: time.Now(),
		})
		if cerr != nil {
			return cerr
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s = open()
	var n int
	if err := s.View(func(tx *store.Tx) error { n = tx.Count(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("store holds %d records, want 1", n)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("opening an initialised store read-write changed the file (a write transaction ran)")
	}
}

// The fill helper writes host-local's on-disk format, which hostlease's
// importer (and host-local) read back: same owner, same round-robin point.
func TestHostLocalStateFormat(t *testing.T) {
	dir := t.TempDir()
	held := []netip.Addr{netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.4")}
	names := []string{"fill-000000", "fill-000002"}
	last := netip.MustParseAddr("10.1.0.254")
	if err := writeHostLocalState(dir, "net", held, names, last); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "net", "10.1.0.4"))
	if err != nil {
		t.Fatal(err)
	}
	if want := containerID("fill-000002") + "\r\neth0"; string(b) != want {
		t.Fatalf("reservation file holds %q, want %q", b, want)
	}
	s, err := store.Open(filepath.Join(dir, "store.db"), store.OpenOptions{Create: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Update(func(tx *store.Tx) error {
		n, err := allocator.MigrateOnce(tx, filepath.Join(dir, "net"), "net", nil, time.Now())
		if err != nil {
			return err
		}
		if n != len(held) {
			t.Errorf("imported %d reservations, want %d", n, len(held))
		}
		r, err := tx.Get(held[1])
		if err != nil || r == nil || r.ContainerID != containerID(names[1]) || r.IfName != "eth0" {
			t.Errorf("imported record for %s = %+v, %v", held[1], r, err)
		}
		if got, ok := tx.LastReserved(0); !ok || got != last {
			t.Errorf("last reserved = %s, %v; want %s", got, ok, last)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHoles(t *testing.T) {
	for _, size := range []int{4093, 65533} {
		h := holes(size, 0.999)
		held := size - len(h)
		if float64(held)/float64(size) < 0.999 || float64(held-1)/float64(size) >= 0.999 {
			t.Errorf("pool %d: %d held is not the least count >= 99.9%%", size, held)
		}
		for i := 1; i < len(h); i++ {
			if h[i] <= h[i-1] || h[i] >= size {
				t.Errorf("pool %d: holes not increasing inside the pool: %v", size, h)
				break
			}
		}
	}
	if got := percentile([]time.Duration{5, 1, 4, 2, 3}, 0.5); got != 3 {
		t.Errorf("p50 of 1..5 = %d, want 3", got)
	}
}
