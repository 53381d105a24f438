package store

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestAuditLogBoundedAndOrdered(t *testing.T) {
	s := newStore(t)
	const extra = 3*auditPrune + 37
	t0 := time.Unix(1700000000, 0).UTC()
	// Many transactions, several events each, as DELs would write them.
	for i := 0; i < auditLimit+extra; {
		update(t, s, func(tx *Tx) error {
			for j := 0; j < 50 && i < auditLimit+extra; j++ {
				if err := tx.Audit(allocator.AuditEvent{Time: t0.Add(time.Duration(i) * time.Second), Action: "release", ContainerID: fmt.Sprint("c", i)}); err != nil {
					return err
				}
				i++
			}
			return nil
		})
	}
	view(t, s, func(tx *Tx) error {
		n := tx.audit.Stats().KeyN
		if n < auditLimit || n >= auditLimit+auditPrune {
			t.Errorf("audit bucket holds %d entries, want %d to %d", n, auditLimit, auditLimit+auditPrune-1)
		}
		if tx.auditq.Root() != 0 {
			t.Errorf("the audit queue is not inline (root page %d)", tx.auditq.Root())
		}
		n += queueLen(tx)
		all, err := tx.AuditLog(1 << 20)
		if err != nil {
			return err
		}
		if len(all) != n {
			t.Fatalf("AuditLog returned %d events, the buckets hold %d", len(all), n)
		}
		total := auditLimit + extra
		if all[0].ContainerID != fmt.Sprint("c", total-n) || all[len(all)-1].ContainerID != fmt.Sprint("c", total-1) {
			t.Errorf("AuditLog spans %s..%s, want the newest: c%d..c%d", all[0].ContainerID, all[len(all)-1].ContainerID, total-n, total-1)
		}
		for i := 1; i < len(all); i++ {
			if !all[i-1].Time.Before(all[i].Time) {
				t.Fatalf("AuditLog not oldest first at %d: %v then %v", i, all[i-1].Time, all[i].Time)
			}
		}
		last3, err := tx.AuditLog(3)
		if err != nil {
			return err
		}
		var got []string
		for _, ev := range last3 {
			got = append(got, ev.ContainerID)
		}
		eq(t, "AuditLog(3)", got, []string{fmt.Sprint("c", total-3), fmt.Sprint("c", total-2), fmt.Sprint("c", total-1)})
		return nil
	})
}

func TestExhaustionCounters(t *testing.T) {
	dir := t.TempDir()
	path := FilePath(dir, "net1")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t1, t2 := time.Unix(1700000000, 0).UTC(), time.Unix(1700000100, 0).UTC()
	update(t, s, func(tx *Tx) error {
		if ex, err := tx.Exhaustions(); err != nil || len(ex) != 0 {
			t.Errorf("fresh store Exhaustions = %v, %v", ex, err)
		}
		if err := tx.RecordExhaustion(0, "10.0.0.1-10.0.0.14", t1); err != nil {
			return err
		}
		return tx.RecordExhaustion(1, "fd00::1-fd00::f", t1)
	})
	update(t, s, func(tx *Tx) error { return tx.RecordExhaustion(0, "10.0.0.1-10.0.0.14", t2) })
	s.Close()
	s, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		ex, err := tx.Exhaustions()
		if err != nil {
			return err
		}
		eq(t, "Exhaustions", ex, map[int]allocator.Exhaustion{
			0: {Count: 2, Last: t2, RangeSet: "10.0.0.1-10.0.0.14"},
			1: {Count: 1, Last: t1, RangeSet: "fd00::1-fd00::f"},
		})
		return nil
	})
}

func TestLastReservedAndRangeSets(t *testing.T) {
	dir := t.TempDir()
	path := FilePath(dir, "net1")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	sets := []allocator.StoredRangeSet{
		rangetest.Set(rangetest.Range("10.0.0.0/28", "10.0.0.1", "10.0.0.14", "10.0.0.1"), rangetest.Range("10.0.1.0/28", "10.0.1.4", "10.0.1.8", "")),
		rangetest.Set(rangetest.Range("fd00::/120", "fd00::1", "fd00::ff", "fd00::1")),
	}
	update(t, s, func(tx *Tx) error {
		if _, ok := tx.LastReserved(0); ok {
			t.Error("fresh store has a last reserved address")
		}
		if got, err := tx.RangeSets(); err != nil || got != nil {
			t.Errorf("fresh store RangeSets = %v, %v", got, err)
		}
		if err := tx.SetLastReserved(0, netip.MustParseAddr("10.0.0.7")); err != nil {
			return err
		}
		if err := tx.SetLastReserved(1, netip.MustParseAddr("fd00::9")); err != nil {
			return err
		}
		if err := tx.SetLastReserved(0, netip.MustParseAddr("10.0.1.5")); err != nil {
			return err
		}
		if err := tx.SetNetwork("net1"); err != nil {
			return err
		}
		return tx.SetRangeSets(sets)
	})
	s.Close()
	s, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		for idx, want := range map[int]string{0: "10.0.1.5", 1: "fd00::9", 2: ""} {
			got, ok := tx.LastReserved(idx)
			if want == "" {
				if ok {
					t.Errorf("LastReserved(%d) = %v, want none", idx, got)
				}
				continue
			}
			if !ok || got != netip.MustParseAddr(want) {
				t.Errorf("LastReserved(%d) = %v, %v; want %s", idx, got, ok, want)
			}
		}
		got, err := tx.RangeSets()
		if err != nil {
			return err
		}
		eq(t, "RangeSets", got, sets)
		eq(t, "Network", tx.Network(), "net1")
		return nil
	})
}

func TestMigrateOnceRunsOnce(t *testing.T) {
	dir := t.TempDir()
	hl := filepath.Join(dir, "net1")
	os.MkdirAll(hl, 0o755)
	os.WriteFile(filepath.Join(hl, "10.0.0.5"), []byte("c1\r\neth0"), 0o600)
	path := FilePath(dir, "net1")
	sets := []allocator.StoredRangeSet{rangetest.Set(rangetest.Range("10.0.0.0/28", "10.0.0.1", "10.0.0.14", "10.0.0.1"))}
	now := time.Unix(1700000000, 0).UTC()
	migrate := func() int {
		s, err := Open(path, OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		n := -1
		update(t, s, func(tx *Tx) error {
			var err error
			n, err = allocator.MigrateOnce(tx, hl, "net1", sets, now)
			return err
		})
		return n
	}
	if n := migrate(); n != 1 {
		t.Fatalf("first MigrateOnce imported %d, want 1", n)
	}
	// host-local state written later (or left behind) is not imported again:
	// the store is the source of truth from now on.
	os.WriteFile(filepath.Join(hl, "10.0.0.6"), []byte("c2\r\neth0"), 0o600)
	os.Remove(filepath.Join(hl, "10.0.0.5"))
	if n := migrate(); n != 0 {
		t.Fatalf("second MigrateOnce imported %d, want 0", n)
	}
	s, err := Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		if !tx.Taken(netip.MustParseAddr("10.0.0.5")) || tx.Taken(netip.MustParseAddr("10.0.0.6")) {
			t.Errorf("store holds 10.0.0.5=%v 10.0.0.6=%v; want only the first import", tx.Taken(netip.MustParseAddr("10.0.0.5")), tx.Taken(netip.MustParseAddr("10.0.0.6")))
		}
		return nil
	})
	// A store created before host-local state existed also counts as migrated.
	dir2 := t.TempDir()
	s2, err := Open(FilePath(dir2, "net1"), OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	update(t, s2, func(tx *Tx) error {
		if n, err := allocator.MigrateOnce(tx, filepath.Join(dir2, "net1"), "net1", sets, now); n != 0 || err != nil {
			t.Errorf("MigrateOnce without host-local state = %d, %v", n, err)
		}
		return nil
	})
	os.MkdirAll(filepath.Join(dir2, "net1"), 0o755)
	os.WriteFile(filepath.Join(dir2, "net1", "10.0.0.9"), []byte("c9\r\neth0"), 0o600)
	update(t, s2, func(tx *Tx) error {
		if n, err := allocator.MigrateOnce(tx, filepath.Join(dir2, "net1"), "net1", sets, now); n != 0 || err != nil {
			t.Errorf("second MigrateOnce = %d, %v; want 0", n, err)
		}
		return nil
	})
}

// The export mark: absent from a store never exported (and not created by
// opening one), read back as written, and a value that does not decode is
// read as an export without a stamp (the next write merges), never as "not
// exported".
func TestHostLocalExportMark(t *testing.T) {
	s := newStore(t)
	view(t, s, func(tx *Tx) error {
		if m, ok := tx.HostLocalExport(); ok {
			t.Errorf("a new store reads as exported: %+v", m)
		}
		return nil
	})
	want := allocator.HostLocalExport{At: time.Unix(1700000000, 42).UTC(), Seen: allocator.DirStamp{Dev: 2049, Ino: 1 << 40, Ctime: 1700000000123456789}}
	update(t, s, func(tx *Tx) error { return tx.SetHostLocalExport(want) })
	view(t, s, func(tx *Tx) error {
		m, ok := tx.HostLocalExport()
		if !ok || !m.At.Equal(want.At) || m.Seen != want.Seen {
			t.Errorf("mark read back as %+v %v, want %+v", m, ok, want)
		}
		return nil
	})
	for _, v := range [][]byte{{}, {1, 2, 3}, append([]byte{9}, make([]byte, 32)...)} {
		damage(t, s, func(tx *Tx) error { return tx.meta.Put(keyExport, v) })
		view(t, s, func(tx *Tx) error {
			if m, ok := tx.HostLocalExport(); !ok || m.Seen.Valid() {
				t.Errorf("damaged mark %x read as %+v %v, want exported without a stamp", v, m, ok)
			}
			return nil
		})
	}
}
