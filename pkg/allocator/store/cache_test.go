package store

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// The sweep tests open their own stores through the store's API (and write
// to the allocs bucket only to plant a damaged value), so that they depend on
// no other test file.

func sweepStore(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sweep.db")
	s, err := Open(path, OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := s.Update(func(tx *Tx) error {
		ip := netip.MustParseAddr("10.0.0.2")
		for i := range n {
			r := &allocator.Record{IP: ip, PrefixLen: 16, ContainerID: fmt.Sprintf("sb-%d", i), IfName: "eth0", Network: "net",
				PodNamespace: "ns", PodName: fmt.Sprintf("pod-%d", i), PodUID: fmt.Sprintf("uid-%d", i),
				Netns: "/var/run/netns/x", State: allocator.StatePending, Source: "add", Created: created}
			if err := tx.Put(r); err != nil {
				return err
			}
			ip = ip.Next()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

func sweepUpdate(t *testing.T, path string, fn func(tx *Tx) error) {
	t.Helper()
	s, err := Open(path, OpenOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// sweepScan is one daemon snapshot: a scan under the read lock, decoded after
// the store is closed.
func sweepScan(t *testing.T, path string, c *RecordCache) ([]Seen, error) {
	t.Helper()
	s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var scan *RecordScan
	err = s.View(func(tx *Tx) error { scan = tx.ScanRecords(c); return nil })
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	return scan.Decode()
}

// allRecords decodes every record the plain way.
func allRecords(t *testing.T, path string) []*allocator.Record {
	t.Helper()
	s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []*allocator.Record
	if err := s.View(func(tx *Tx) error {
		return tx.ForEach(func(r *allocator.Record) error { out = append(out, r); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func seenRecords(seen []Seen) []*allocator.Record {
	var out []*allocator.Record
	for _, s := range seen {
		out = append(out, s.Rec)
	}
	return out
}

// A scan decodes only what changed since the cache's last scan, and always
// returns what a plain decode of the store returns.
func TestScanRecordsDecodesOnlyChanges(t *testing.T) {
	for _, n := range []int{0, 5, 3000} { // 3000: decoded on several goroutines
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			path := sweepStore(t, n)
			c := &RecordCache{}
			first, err := sweepScan(t, path, c)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := seenRecords(first), allRecords(t, path); !reflect.DeepEqual(got, want) {
				t.Fatalf("first scan: %d records, a plain decode %d (or they differ)", len(got), len(want))
			}
			second, err := sweepScan(t, path, c)
			if err != nil {
				t.Fatal(err)
			}
			for i := range second {
				if second[i].Rec != first[i].Rec {
					t.Fatalf("record %d decoded again although unchanged", i)
				}
			}
			if n == 0 {
				return
			}
			// A plugin changes one record, releases another, adds one.
			sweepUpdate(t, path, func(tx *Tx) error {
				r, _ := tx.Get(first[1].Rec.IP)
				r.State = allocator.StateCommitted
				if err := tx.Put(r); err != nil {
					return err
				}
				if _, err := tx.remove(first[0].Rec.IP); err != nil {
					return err
				}
				return tx.Put(&allocator.Record{IP: netip.MustParseAddr("10.0.255.1"), ContainerID: "new", IfName: "eth0", Created: time.Unix(1, 0).UTC()})
			})
			third, err := sweepScan(t, path, c)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := seenRecords(third), allRecords(t, path); !reflect.DeepEqual(got, want) {
				t.Fatalf("after a plugin's changes the scan differs from a plain decode")
			}
			if third[0].Rec == first[1].Rec || third[0].Rec.State != allocator.StateCommitted {
				t.Fatalf("changed record not decoded again: %+v", third[0].Rec)
			}
			for i := 1; i < len(third)-1; i++ {
				if third[i].Rec != first[i+1].Rec {
					t.Fatalf("unchanged record %s decoded again", third[i].Rec.IP)
				}
			}
		})
	}
}

// An undecodable record never fails the scan: the scan returns every other
// record and lists the damaged one by address; it is not decoded again while
// its bytes stay the same, and once repaired it is decoded and returned.
func TestScanRecordsUndecodable(t *testing.T) {
	path := sweepStore(t, 2000)
	c := &RecordCache{}
	before, err := sweepScan(t, path, c)
	if err != nil {
		t.Fatal(err)
	}
	bad := before[1500].Rec.IP // on the second goroutine
	sweepUpdate(t, path, func(tx *Tx) error { return tx.allocs.Put(addrKey(bad), []byte("{not a record")) })
	for range 2 { // the second scan finds the damaged record in the cache
		s, err := Open(path, OpenOptions{ReadOnly: true, LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var scan *RecordScan
		if err := s.View(func(tx *Tx) error { scan = tx.ScanRecords(c); return nil }); err != nil {
			t.Fatal(err)
		}
		s.Close()
		got, err := scan.Decode()
		if err != nil {
			t.Fatalf("scan of a store with an undecodable record failed: %v", err)
		}
		if len(got) != len(before)-1 {
			t.Fatalf("scan returned %d records, want the %d healthy ones", len(got), len(before)-1)
		}
		for _, sr := range got {
			if sr.Rec.IP == bad {
				t.Fatalf("the damaged record %s was returned as a record", bad)
			}
		}
		d := scan.Damaged()
		if len(d) != 1 || d[0].IP != bad || !strings.Contains(d[0].Err.Error(), "record "+bad.String()+": ") || string(d[0].Raw) != "{not a record" {
			t.Fatalf("Damaged() = %+v, want the record at %s with its bytes", d, bad)
		}
	}
	sweepUpdate(t, path, func(tx *Tx) error { return tx.allocs.Put(addrKey(bad), before[1500].raw) })
	after, err := sweepScan(t, path, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("after the repair the scan returned %d records, want %d", len(after), len(before))
	}
	for i := range after {
		if after[i].Rec != before[i].Rec && i != 1500 {
			t.Fatalf("record %s decoded again: the damaged record changed the cache", after[i].Rec.IP)
		}
	}
}
