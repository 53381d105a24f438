package allocator

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
)

func TestDecideMerge(t *testing.T) {
	file := func(id, ifname string) HostLocalFile {
		return HostLocalFile{IP: netip.MustParseAddr("10.0.0.4"), ContainerID: id, IfName: ifname}
	}
	held := func(id, ifname string) *Record { return rec("10.0.0.4", id, ifname) }
	damaged := func(id, ifname string) *DamagedRecord {
		return &DamagedRecord{IP: netip.MustParseAddr("10.0.0.4"), ContainerID: id, IfName: ifname, Err: errors.New("bad")}
	}
	for _, tc := range []struct {
		name    string
		f       HostLocalFile
		held    *Record
		damaged *DamagedRecord
		want    MergeVerdict
	}{
		{"nothing held: import", file("c", "eth0"), nil, nil, MergeImport},
		{"legacy file, nothing held: import", file("c", ""), nil, nil, MergeImport},
		{"same attachment", file("c", "eth0"), held("c", "eth0"), nil, MergeSame},
		{"legacy file of the holder", file("c", ""), held("c", "eth0"), nil, MergeSame},
		{"file of a legacy record's container", file("c", "eth0"), held("c", ""), nil, MergeSame},
		{"another container", file("c", "eth0"), held("e", "eth0"), nil, MergeConflict},
		{"same container, another ifname", file("c", "net1"), held("c", "eth0"), nil, MergeConflict},
		{"empty container ID is nobody's", file("", ""), held("e", "eth0"), nil, MergeConflict},
		{"damaged record of the same attachment", file("c", "eth0"), nil, damaged("c", "eth0"), MergeSame},
		{"damaged record of another", file("c", "eth0"), nil, damaged("e", "eth0"), MergeConflict},
		{"damaged record, owner unreadable, export's placeholder", file(DamagedPlaceholder, ""), nil, damaged("", ""), MergeSame},
		{"damaged record, owner unreadable, a real file", file("c", "eth0"), nil, damaged("", ""), MergeConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideMerge(tc.f, tc.held, tc.damaged); got != tc.want {
				t.Errorf("DecideMerge = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDirStampSettled(t *testing.T) {
	ctime := time.Unix(1700000000, 500)
	s := DirStamp{Dev: 1, Ino: 2, Ctime: ctime.UnixNano()}
	for _, tc := range []struct {
		name string
		s    DirStamp
		now  time.Time
		want DirStamp
	}{
		{"changed long ago: trusted", s, ctime.Add(time.Hour), s},
		{"changed exactly stampSettle ago: trusted", s, ctime.Add(stampSettle), s},
		{"changed within the settle time: zero", s, ctime.Add(stampSettle - time.Nanosecond), DirStamp{}},
		{"changed after now (a clock stepped back): zero", s, ctime.Add(-time.Minute), DirStamp{}},
		{"no stamp", DirStamp{}, ctime.Add(time.Hour), DirStamp{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.settled(tc.now); got != tc.want {
				t.Errorf("settled = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Rollback and return, as the allocation policy sees it: hostlease holds
// .2 and .3, exports them, host-local's own allocator (and disk store)
// hands out .4 and .5; back under hostlease, the next write merges them
// before anything is chosen, so the next addresses are .6 and .7.
func TestSyncHostLocalMergesWhatHostLocalDidAfterExport(t *testing.T) {
	hlSets, sets := hostLocalSets(t, `[[{"subnet":"10.0.0.0/24"}]]`)
	dataDir := t.TempDir()
	dir := HostLocalDir(dataDir, "net1")
	s := newStore(t)
	var got []string
	for _, id := range []string{"a", "b"} {
		update(t, s, func(tx Store) error {
			if _, err := SyncHostLocal(tx, dir, "net1", sets, ByPlugin, testTime); err != nil {
				return err
			}
			recs, aerr := Allocate(tx, AllocateRequest{Network: "net1", RangeSets: sets, Owner: Owner{ContainerID: id, IfName: "eth0"}, Now: testTime})
			if aerr != nil {
				return aerr
			}
			got = append(got, recs[0].IP.String())
			return nil
		})
	}
	eq(t, "hostlease before the rollback", got, []string{"10.0.0.2", "10.0.0.3"})
	exportAt := time.Now()
	update(t, s, func(tx Store) error {
		_, err := ExportHostLocal(tx, dir, "net1", nil, ByCLI("export"), exportAt)
		return err
	})
	if !s.HostLocalMark().Exported {
		t.Fatal("export did not mark the store")
	}

	hlStore, err := disk.New("net1", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, id := range []string{"c", "d"} {
		got = append(got, hostLocalAdd(t, hlStore, hlSets, id, "eth0")...)
	}
	hlStore.Close()
	eq(t, "host-local after the rollback", got, []string{"10.0.0.4", "10.0.0.5"})

	got = nil
	var merged ImportResult
	for _, id := range []string{"e", "f"} {
		update(t, s, func(tx Store) error {
			res, err := SyncHostLocal(tx, dir, "net1", sets, ByPlugin, time.Now())
			if err != nil {
				return err
			}
			merged.Imported += res.Imported
			recs, aerr := Allocate(tx, AllocateRequest{Network: "net1", RangeSets: sets, Owner: Owner{ContainerID: id, IfName: "eth0"}, Now: testTime})
			if aerr != nil {
				return aerr
			}
			got = append(got, recs[0].IP.String())
			return nil
		})
	}
	eq(t, "hostlease after the return", got, []string{"10.0.0.6", "10.0.0.7"})
	eq(t, "records merged", merged.Imported, 2)
	for ip, id := range map[string]string{"10.0.0.4": "c", "10.0.0.5": "d"} {
		r, _ := s.Lookup(netip.MustParseAddr(ip))
		if r == nil || r.ContainerID != id || r.Source != SourceHostLocal || r.RangeSet != 0 || r.State != StateCommitted {
			t.Errorf("%s after the merge: %+v, want host-local's reservation of %s", ip, r, id)
		}
	}
	var imports int
	for _, ev := range s.audit {
		if ev.Action == AuditImport && ev.By == ByPlugin {
			imports++
		}
	}
	eq(t, "import audit entries by the plugin", imports, 1)
}

// The merge's cheap path and its conflicts: once merged with a settled
// stamp, a write that finds host-local's directory unchanged reads no file;
// a change to the directory is merged at the next write, and a file naming
// an address the store holds for another attachment is kept for the store's
// holder, reported and audited, never handed out.
func TestSyncHostLocalStampAndConflicts(t *testing.T) {
	sets := []StoredRangeSet{set(rng("10.0.0.0/24", "10.0.0.1", "10.0.0.254", "10.0.0.1"))}
	dir := filepath.Join(t.TempDir(), "net1")
	s := newStore(t)
	update(t, s, func(tx Store) error {
		if err := tx.SetHostLocalMark(HostLocalMark{Imported: true}, testTime); err != nil {
			return err
		}
		r := rec("10.0.0.3", "b", "eth0")
		r.RangeSet = 0
		return tx.Put(r)
	})
	// Exported now: the directory changed within the settle time, so the
	// mark has no stamp yet and the first write merges.
	update(t, s, func(tx Store) error {
		_, err := ExportHostLocal(tx, dir, "net1", nil, ByCLI("export"), time.Now())
		return err
	})
	if m := s.HostLocalMark().Export; m.Seen.Valid() {
		t.Fatalf("export recorded the stamp %+v of a directory it just changed", m.Seen)
	}
	later := time.Now().Add(time.Hour) // every stamp taken below is settled by then
	sync := func(now time.Time) ImportResult {
		t.Helper()
		var res ImportResult
		update(t, s, func(tx Store) error {
			var err error
			res, err = SyncHostLocal(tx, dir, "net1", sets, ByPlugin, now)
			return err
		})
		return res
	}
	first := sync(later)
	eq(t, "first merge after the export: same", first.Same, 1)
	m := s.HostLocalMark().Export
	if !m.Seen.Valid() {
		t.Fatalf("a settled merge left no stamp: %+v", m)
	}

	// The file's content changes, the directory does not: nothing is read.
	if err := os.WriteFile(filepath.Join(dir, "10.0.0.3"), []byte("x\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	eq(t, "merge of an unchanged directory", sync(later), ImportResult{})

	// A new file changes the directory: the next write merges it and meets
	// the conflict.
	if err := os.WriteFile(filepath.Join(dir, "10.0.0.9"), []byte("c\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := sync(later)
	eq(t, "imported", res.Imported, 1)
	if len(res.Conflicts) != 1 {
		t.Fatalf("conflicts = %+v, want 10.0.0.3", res.Conflicts)
	}
	eq(t, "conflict", res.Conflicts[0], ImportConflict{File: HostLocalFile{IP: netip.MustParseAddr("10.0.0.3"), ContainerID: "x", IfName: "eth0"},
		StoreContainerID: "b", StoreIfName: "eth0"})
	if r, _ := s.Lookup(netip.MustParseAddr("10.0.0.3")); r == nil || r.ContainerID != "b" {
		t.Errorf("10.0.0.3 after the conflict: %+v, want still held for b", r)
	}
	last := s.audit[len(s.audit)-2]
	if last.Action != AuditImportConflict || last.IP != netip.MustParseAddr("10.0.0.3") || last.ContainerID != "x" || last.By != ByPlugin {
		t.Errorf("conflict audit entry %+v", last)
	}

	// A merge whose directory changed within the settle time records no
	// stamp: the next write merges again (and meets the conflict again).
	if err := os.Remove(filepath.Join(dir, "10.0.0.9")); err != nil {
		t.Fatal(err)
	}
	sync(time.Now())
	if m := s.HostLocalMark().Export; m.Seen.Valid() {
		t.Errorf("a merge right after a change recorded the stamp %+v", m.Seen)
	}
	eq(t, "the next write merges again: conflicts", len(sync(later).Conflicts), 1)
}

// A store never exported never looks at host-local's directory after its
// first use (the migration): a rollback without export is the operator's
// `import` to find.
func TestSyncHostLocalWithoutExportIsMigrateOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net1")
	s := newStore(t)
	update(t, s, func(tx Store) error { _, err := SyncHostLocal(tx, dir, "net1", nil, ByPlugin, testTime); return err })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10.0.0.9"), []byte("c\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx Store) error {
		res, err := SyncHostLocal(tx, dir, "net1", nil, ByPlugin, testTime)
		eq(t, "merge of a store never exported", res, ImportResult{})
		return err
	})
}

// What SyncHostLocal adds to every plugin write: a store never exported
// (one more key lookup than MigrateOnce), and an exported store whose
// host-local directory is unchanged since its last merge (an lstat).
func BenchmarkSyncHostLocal(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "net1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, exported := range []bool{false, true} {
		name := "never-exported"
		if exported {
			name = "exported-unchanged"
		}
		b.Run(name, func(b *testing.B) {
			s := newMemStore()
			s.mark.Imported = true
			if exported {
				st, err := statDir(dir)
				if err != nil {
					b.Fatal(err)
				}
				s.mark.Exported, s.mark.Export = true, HostLocalExport{Seen: st}
			}
			for b.Loop() {
				if res, err := SyncHostLocal(s, dir, "net1", nil, ByPlugin, testTime); err != nil || res.Stamp.Valid() {
					b.Fatalf("%+v %v: merged", res, err)
				}
			}
		})
	}
}

// host-local's round-robin point replaces the store's only when a merge
// finds reservations host-local made: a change that is only a DEL (podman
// with a cached host-local config) does not move hostlease's point back.
func TestSyncHostLocalRoundRobin(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net1")
	s := newStore(t)
	update(t, s, func(tx Store) error {
		if err := tx.SetHostLocalMark(HostLocalMark{Imported: true}, testTime); err != nil {
			return err
		}
		if err := tx.Configure("", []StoredRangeSet{set(rng("10.0.0.0/24", "10.0.0.1", "10.0.0.254", "10.0.0.1"))}); err != nil {
			return err
		}
		for _, ip := range []string{"10.0.0.2", "10.0.0.3"} {
			if err := tx.Put(rec(ip, "c"+ip, "eth0")); err != nil {
				return err
			}
		}
		return tx.SetLastReserved(0, netip.MustParseAddr("10.0.0.3"))
	})
	update(t, s, func(tx Store) error {
		_, err := ExportHostLocal(tx, dir, "net1", nil, ByCLI("export"), time.Now())
		return err
	})
	sync := func() {
		t.Helper()
		update(t, s, func(tx Store) error { _, err := SyncHostLocal(tx, dir, "net1", nil, ByPlugin, time.Now()); return err })
	}
	point := func() string { ip, _ := s.LastReserved(0); return ip.String() }
	sync()
	// hostlease goes on; then host-local's DEL of c10.0.0.2 only.
	update(t, s, func(tx Store) error { return tx.SetLastReserved(0, netip.MustParseAddr("10.0.0.40")) })
	if err := os.Remove(filepath.Join(dir, "10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	sync()
	eq(t, "round-robin point after a host-local DEL", point(), "10.0.0.40")
	// host-local's ADD of .41.
	os.WriteFile(filepath.Join(dir, "10.0.0.41"), []byte("n\r\neth0"), 0o600)
	os.WriteFile(filepath.Join(dir, "last_reserved_ip.0"), []byte("10.0.0.41"), 0o600)
	sync()
	eq(t, "round-robin point after a host-local ADD", point(), "10.0.0.41")
}
