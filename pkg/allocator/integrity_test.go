package allocator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// auditActions returns the actions of the store's audit log, oldest first.
func auditActions(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	view(t, s, func(tx *Tx) error {
		evs, err := tx.AuditLog(auditLimit)
		for _, ev := range evs {
			out = append(out, ev.Action)
		}
		return err
	})
	return out
}

// damage applies fn to a store's buckets directly, bypassing Tx (as bit rot,
// a bad restore or a bug would).
func damage(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.db.Update(func(btx *bolt.Tx) error { return fn(wrapTx(btx)) }); err != nil {
		t.Fatalf("damage: %v", err)
	}
}

// consistent asserts that the indexes agree with the records.
func consistent(t *testing.T, s *Store) {
	t.Helper()
	view(t, s, func(tx *Tx) error {
		if r := tx.VerifyIndexes(); r.Changed() {
			t.Errorf("indexes disagree with the records: %s", r)
		}
		if !tx.indexesAgree() {
			t.Error("indexesAgree is false on a consistent store")
		}
		return nil
	})
}

// A lost bit in the taken bitmap never hands out a held address: ADD checks
// its candidate against the records, repairs the indexes and audits it.
func TestAllocateNeverTakesARecordedAddress(t *testing.T) {
	cases := []struct {
		name  string
		clear []string // bits to clear
	}{
		{"one bit of the next candidate", []string{"10.0.0.3"}},
		{"every bit", []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}},
		{"bits of two candidates in a row", []string{"10.0.0.3", "10.0.0.4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []StoredRangeSet{set4}, id)
			}
			// Free .2 so round robin (last reserved .4) moves on to .5, then
			// wraps; reset the round-robin point so the next ADD starts at .2.
			update(t, s, func(tx *Tx) error { return tx.meta.Delete(lastReservedKey(0)) })
			damage(t, s, func(tx *Tx) error {
				for _, ip := range tc.clear {
					if err := (takenBits{tx.taken}).set(netip.MustParseAddr(ip), false); err != nil {
						return err
					}
				}
				return nil
			})
			got := mustGet(t, s, []StoredRangeSet{set4}, "d")
			if slices.Contains([]string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, got[0]) {
				t.Fatalf("ADD handed out %s, held by another container", got[0])
			}
			if got[0] != "10.0.0.5" {
				t.Errorf("ADD got %s, want 10.0.0.5 (the first address without a record)", got[0])
			}
			for _, id := range []string{"a", "b", "c", "d"} {
				if len(held(t, s, id, "eth0")) != 1 {
					t.Errorf("%s lost its record", id)
				}
			}
			consistent(t, s)
			if acts := auditActions(t, s); !slices.Contains(acts, AuditIndexRepair) {
				t.Errorf("no %s audit event: %v", AuditIndexRepair, acts)
			}
		})
	}
}

// A requested address with a record is unavailable even when its bit is lost.
func TestAllocateRequestedChecksTheRecord(t *testing.T) {
	s := newStore(t)
	mustGet(t, s, []StoredRangeSet{set4}, "a", "10.0.0.4")
	damage(t, s, func(tx *Tx) error { return takenBits{tx.taken}.set(netip.MustParseAddr("10.0.0.4"), false) })
	r := alloc(t, s, []StoredRangeSet{set4}, "b", "eth0", "10.0.0.4")
	if r.err == nil || r.err.Code != ErrAddressUnavailable {
		t.Fatalf("requesting a recorded address whose bit was lost: %v %v", r.ips(), r.err)
	}
	if got := held(t, s, "a", "eth0"); !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Errorf("the holder's record: %v", got)
	}
	consistent(t, s)
}

// DEL (Release) finds its records whatever happened to the owner index, and
// repairs it; a consistent store is not scanned.
func TestReleaseFindsRecordsWhenTheOwnerIndexIsWrong(t *testing.T) {
	cases := []struct {
		name   string
		damage func(tx *Tx) error
	}{
		{"its entry deleted", func(tx *Tx) error {
			return tx.owners.Delete(append(ownerPrefix("b", "eth0"), addrKey(netip.MustParseAddr("10.0.0.3"))...))
		}},
		{"every entry deleted", func(tx *Tx) error {
			if err := tx.btx.DeleteBucket(bucketOwners); err != nil {
				return err
			}
			_, err := tx.btx.CreateBucket(bucketOwners)
			return err
		}},
		{"its entry under another owner", func(tx *Tx) error {
			k := addrKey(netip.MustParseAddr("10.0.0.3"))
			if err := tx.owners.Delete(append(ownerPrefix("b", "eth0"), k...)); err != nil {
				return err
			}
			return tx.owners.Put(append(ownerPrefix("zz", "eth0"), k...), nil)
		}},
		{"records count lost", func(tx *Tx) error {
			if err := tx.meta.Delete(keyRecords); err != nil {
				return err
			}
			return tx.owners.Delete(append(ownerPrefix("b", "eth0"), addrKey(netip.MustParseAddr("10.0.0.3"))...))
		}},
		{"records count damaged", func(tx *Tx) error {
			if err := tx.meta.Put(keyRecords, []byte("xx")); err != nil {
				return err
			}
			return tx.owners.Delete(append(ownerPrefix("b", "eth0"), addrKey(netip.MustParseAddr("10.0.0.3"))...))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []StoredRangeSet{set4}, id)
			}
			damage(t, s, tc.damage)
			// A read-only look (CHECK) finds it without writing.
			if got := held(t, s, "b", "eth0"); !slices.Equal(got, []string{"10.0.0.3"}) {
				t.Errorf("Held(b) = %v, want 10.0.0.3", got)
			}
			if got := release(t, s, "b", "eth0"); !slices.Equal(got, []string{"10.0.0.3"}) {
				t.Fatalf("Release(b) = %v, want 10.0.0.3", got)
			}
			view(t, s, func(tx *Tx) error {
				if tx.hasRecord(netip.MustParseAddr("10.0.0.3")) {
					t.Error("b's record is still there")
				}
				return nil
			})
			consistent(t, s)
			if acts := auditActions(t, s); !slices.Contains(acts, AuditIndexRepair) {
				t.Errorf("no %s audit event: %v", AuditIndexRepair, acts)
			}
			for _, id := range []string{"a", "c"} {
				if len(held(t, s, id, "eth0")) != 1 {
					t.Errorf("%s lost its record", id)
				}
			}
		})
	}
}

// indexesAgree is the gate of the fallback scan: it must say no for each
// kind of disagreement and yes for a consistent store.
func TestIndexesAgree(t *testing.T) {
	a3 := netip.MustParseAddr("10.0.0.3")
	cases := []struct {
		name   string
		damage func(tx *Tx) error
		want   bool
	}{
		{"consistent", func(*Tx) error { return nil }, true},
		{"owner entry lost", func(tx *Tx) error { return tx.owners.Delete(append(ownerPrefix("b", "eth0"), addrKey(a3)...)) }, false},
		{"stray owner entry", func(tx *Tx) error { return tx.owners.Put(append(ownerPrefix("x", "eth0"), addrKey(a3)...), nil) }, false},
		{"bit lost", func(tx *Tx) error { return takenBits{tx.taken}.set(a3, false) }, false},
		{"stray bit", func(tx *Tx) error { return takenBits{tx.taken}.set(netip.MustParseAddr("10.0.0.6"), true) }, false},
		{"count absent", func(tx *Tx) error { return tx.meta.Delete(keyRecords) }, false},
		{"count wrong", func(tx *Tx) error { return tx.setRecordCount(7) }, false},
		{"record lost", func(tx *Tx) error { return tx.allocs.Delete(addrKey(a3)) }, true}, // nothing left to find
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} {
				mustGet(t, s, []StoredRangeSet{set4}, id)
			}
			damage(t, s, tc.damage)
			view(t, s, func(tx *Tx) error {
				if got := tx.indexesAgree(); got != tc.want {
					t.Errorf("indexesAgree = %v, want %v", got, tc.want)
				}
				return nil
			})
		})
	}
}

// Record values damaged in the ways bit rot, a cut copy or a bug leave them.
func damagedValues(good []byte) map[string][]byte {
	scrambled := bytes.Clone(good)
	for i := 1; i < len(scrambled); i += 3 {
		scrambled[i] ^= 0xa5
	}
	return map[string][]byte{
		"cut after the owner":  good[:len(good)-6],
		"cut in the middle":    good[:len(good)/2],
		"one byte":             good[:1],
		"empty":                {},
		"wrong codec byte":     append([]byte{7}, good[1:]...),
		"newer codec byte":     append([]byte{binaryFormat + 1}, good[1:]...),
		"trailing bytes":       append(bytes.Clone(good), 0, 1, 2),
		"scrambled":            scrambled,
		"broken JSON":          []byte(`{"v":1,"ip":"10.0.0.3","containerID":`),
		"JSON claiming binary": []byte(`{"v":2,"ip":"10.0.0.3","containerID":"b"}`),
		"address family 9":     append([]byte{binaryFormat, 9}, good[2:]...),
	}
}

// A record that does not decode is quarantined: its address is never handed
// out, every verb for its own and other containers goes on, it is listed, and
// ReleaseIP frees it with an audit event.
func TestDamagedRecordQuarantine(t *testing.T) {
	a3 := netip.MustParseAddr("10.0.0.3")
	s0 := newStore(t)
	mustGet(t, s0, []StoredRangeSet{set4}, "b")
	var good []byte
	view(t, s0, func(tx *Tx) error {
		good = bytes.Clone(tx.allocs.Get(addrKey(netip.MustParseAddr("10.0.0.2"))))
		return nil
	})
	for name, bad := range damagedValues(good) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for _, id := range []string{"a", "b", "c"} { // .2 .3 .4
				mustGet(t, s, []StoredRangeSet{set4}, id)
			}
			damage(t, s, func(tx *Tx) error { return tx.allocs.Put(addrKey(a3), bad) })
			var seen []DamagedRecord
			update(t, s, func(tx *Tx) error {
				recs, err := Release(tx, "b", "eth0", "DEL", "plugin", testTime)
				if err != nil || len(recs) != 0 {
					t.Errorf("DEL of the damaged record's own container: %v, %v; want nothing released, no error", ips(recs), err)
				}
				seen = tx.DamagedSeen()
				return err
			})
			if len(seen) != 1 || seen[0].IP != a3 || !bytes.Equal(seen[0].Raw, bad) {
				t.Errorf("DEL did not report the damaged record it may own: %v", seen)
			}
			if got := release(t, s, "a", "eth0"); !slices.Equal(got, []string{"10.0.0.2"}) {
				t.Errorf("DEL of another container: %v", got)
			}
			update(t, s, func(tx *Tx) error {
				n, err := Commit(tx, "c", "eth0", testTime)
				if err != nil || n != 1 {
					t.Errorf("commit marker for another container: %d, %v", n, err)
				}
				gone, err := GarbageCollect(tx, []Attachment{{"c", "eth0"}}, testTime)
				if err != nil || len(gone) != 0 {
					t.Errorf("GC: released %v, %v; want the damaged record kept", ips(gone), err)
				}
				return err
			})
			// Fill the pool: .3 is never handed out.
			for i := range 5 {
				r := alloc(t, s, []StoredRangeSet{set4}, fmt.Sprint("n", i), "eth0")
				if slices.Contains(r.ips(), "10.0.0.3") {
					t.Fatalf("ADD handed out the damaged record's address: %v", r.ips())
				}
			}
			// Even with its bit lost too.
			damage(t, s, func(tx *Tx) error { return takenBits{tx.taken}.set(a3, false) })
			release(t, s, "n0", "eth0")
			if r := alloc(t, s, []StoredRangeSet{set4}, "late", "eth0"); slices.Contains(r.ips(), "10.0.0.3") {
				t.Fatalf("ADD handed out the damaged record's address after its bit was lost: %v", r.ips())
			}
			view(t, s, func(tx *Tx) error {
				d := tx.DamagedRecords()
				if len(d) != 1 || d[0].IP != a3 || d[0].Err == nil {
					t.Errorf("DamagedRecords = %v", d)
				}
				return nil
			})
			update(t, s, func(tx *Tx) error {
				if err := tx.Put(rec("10.0.0.3", "x", "eth0")); !errors.Is(err, ErrAddressHeld) {
					t.Errorf("Put over a damaged record: %v, want ErrAddressHeld", err)
				}
				rel, err := ReleaseIP(tx, a3, "operator", "operator", testTime)
				if err != nil || rel.Damaged == nil || rel.Record != nil {
					t.Errorf("ReleaseIP = %+v, %v; want the damaged record", rel, err)
				}
				return err
			})
			view(t, s, func(tx *Tx) error {
				if tx.hasRecord(a3) || len(tx.DamagedRecords()) != 0 {
					t.Error("ReleaseIP left the damaged record")
				}
				return nil
			})
			if acts := auditActions(t, s); !slices.Contains(acts, AuditDamagedRelease) {
				t.Errorf("no %s audit event: %v", AuditDamagedRelease, acts)
			}
			consistent(t, s)
		})
	}
}

// The owner of a record damaged after its owner fields is still shown.
func TestDamagedRecordSalvagesOwner(t *testing.T) {
	v := appendRecord(rec("10.0.0.3", "sandbox-1", "eth0"))
	d := newDamaged(addrKey(netip.MustParseAddr("10.0.0.3")), v[:len(v)-3], errors.New("x"))
	if d.ContainerID != "sandbox-1" || d.IfName != "eth0" {
		t.Errorf("salvaged owner %q %q", d.ContainerID, d.IfName)
	}
	if d := newDamaged(addrKey(netip.MustParseAddr("10.0.0.3")), v[:12], errors.New("x")); d.IfName != "" {
		t.Errorf("an ifname was read from a value cut before it: %q", d.IfName)
	}
}

// Damaged values other than records never block DEL, and are reported.
func TestDamagedMetaValuesDoNotBlockRelease(t *testing.T) {
	s := newStore(t)
	for _, id := range []string{"a", "b"} {
		mustGet(t, s, []StoredRangeSet{set4}, id)
	}
	update(t, s, func(tx *Tx) error {
		if err := tx.Audit(AuditEvent{Time: testTime, Action: "test"}); err != nil {
			return err
		}
		return tx.RecordExhaustion(0, "x", testTime)
	})
	damage(t, s, func(tx *Tx) error {
		if err := tx.meta.Put(keyRanges, []byte{binaryFormat, 0xff}); err != nil {
			return err
		}
		if err := tx.meta.Put(lastReservedKey(0), []byte{9, 9}); err != nil {
			return err
		}
		if err := tx.exhaustion.Put([]byte("0"), []byte("{cut")); err != nil {
			return err
		}
		c := tx.audit.Cursor()
		k, _ := c.Last()
		return tx.audit.Put(bytes.Clone(k), []byte{binaryFormat, 0xff, 0xff})
	})
	if got := release(t, s, "a", "eth0"); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("DEL with damaged meta values: %v", got)
	}
	view(t, s, func(tx *Tx) error {
		if _, err := tx.RangeSets(); !errors.Is(err, ErrDamagedValue) {
			t.Errorf("RangeSets of a damaged value: %v, want ErrDamagedValue", err)
		}
		if ex, err := tx.Exhaustions(); err != nil || len(ex) != 0 {
			t.Errorf("Exhaustions with a damaged entry: %v, %v", ex, err)
		}
		evs, err := tx.AuditLog(10)
		if err != nil || !slices.ContainsFunc(evs, func(e AuditEvent) bool { return e.Action == AuditDamagedEntry }) {
			t.Errorf("AuditLog with a damaged entry: %v, %v", evs, err)
		}
		return nil
	})
	// ADD still works and rewrites the range sets.
	mustGet(t, s, []StoredRangeSet{set4}, "c")
	view(t, s, func(tx *Tx) error {
		if sets, err := tx.RangeSets(); err != nil || len(sets) != 1 {
			t.Errorf("range sets after an ADD: %v, %v", sets, err)
		}
		return nil
	})
}

func TestErrorClasses(t *testing.T) {
	path := "/var/lib/cni/hostlease/n.db"
	cases := []struct {
		name              string
		err               error
		unreadable, envir bool
		mention           []string
	}{
		{"bbolt invalid", berrors.ErrInvalid, true, false, nil},
		{"bbolt checksum", berrors.ErrChecksum, true, false, nil},
		{"bbolt version", berrors.ErrVersionMismatch, true, false, nil},
		{"file too small", errors.New("file size too small 12"), true, false, nil},
		{"read-only fs", &os.PathError{Op: "open", Path: path, Err: syscall.EROFS}, false, true, []string{"EROFS", path}},
		{"immutable", &os.PathError{Op: "open", Path: path, Err: syscall.EPERM}, false, true, []string{"EPERM"}},
		{"permission", &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}, false, true, []string{"EACCES"}},
		{"too many files", &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}, false, true, []string{"EMFILE"}},
		{"file table full", &os.PathError{Op: "open", Path: path, Err: syscall.ENFILE}, false, true, []string{"ENFILE"}},
		{"no space", fmt.Errorf("write: %w", syscall.ENOSPC), false, true, []string{"ENOSPC"}},
		{"quota", syscall.EDQUOT, false, true, []string{"EDQUOT"}},
		{"i/o", &os.SyscallError{Syscall: "fdatasync", Err: syscall.EIO}, false, true, []string{"EIO"}},
		{"flock", fmt.Errorf("flock: %w", syscall.ENOLCK), false, true, []string{"ENOLCK"}},
		{"mmap", fmt.Errorf("mmap allocate error: %w", syscall.ENOMEM), false, true, []string{"ENOMEM"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := classifyOpenError(path, "open", tc.err)
			if got := errors.Is(err, ErrStoreUnreadable); got != tc.unreadable {
				t.Errorf("%v: unreadable = %v, want %v", err, got, tc.unreadable)
			}
			if got := IsEnvironmentError(err); got != tc.envir {
				t.Errorf("%v: environment = %v, want %v", err, got, tc.envir)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q does not name %s", err, m)
				}
			}
			if tc.envir {
				if err := classifyTxError(path, tc.err); !IsEnvironmentError(err) {
					t.Errorf("commit error %v not an environment error", err)
				}
			}
		})
	}
}

// A read-only store file is an environment error for a read-write open, and
// opens read-only.
func TestOpenReadOnlyFileIsEnvironment(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes through file modes; the plugin-process tests cover read-only file systems and immutable files")
	}
	path := filepath.Join(t.TempDir(), "n.db")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	os.Chmod(path, 0o400)
	if _, err := Open(path, OpenOptions{}); !IsEnvironmentError(err) || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("read-write open of a read-only file: %v", err)
	}
	s, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// Open never follows a symlink at the store path, and never creates a file
// at its target.
func TestOpenRefusesSymlink(t *testing.T) {
	for _, dangling := range []bool{true, false} {
		t.Run(fmt.Sprintf("dangling=%v", dangling), func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "elsewhere.db")
			if !dangling {
				s, err := Open(target, OpenOptions{Create: true})
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
			}
			path := StorePath(dir, "net1")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			for _, o := range []OpenOptions{{Create: true}, {}, {ReadOnly: true}} {
				_, err := Open(path, o)
				if !IsEnvironmentError(err) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "symlink") {
					t.Errorf("Open(%+v) through a symlink: %v; want an ELOOP error naming %s", o, err, path)
				}
			}
			if _, err := os.Stat(target); dangling && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a file was created at the symlink's target: %v", err)
			}
			// bbolt's own open, past the lstat: O_NOFOLLOW.
			if _, err := openBlocking(path, os.O_RDWR, 0o600); !errors.Is(err, syscall.ELOOP) {
				t.Errorf("openBlocking through a symlink: %v", err)
			}
		})
	}
}

// Network names as long as host-local takes (a file name) have a store file
// and temporary names within NAME_MAX; the mapping is deterministic.
func TestLongNetworkNames(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]string{}
	for _, n := range []int{1, 240, 252, 253, 254, 255} {
		name := strings.Repeat("n", n-1) + "x"
		if n == 255 {
			name = strings.Repeat("m", 254) + "x"
		}
		path := StorePath(dir, name)
		base := filepath.Base(path)
		if len(base) > nameMax {
			t.Fatalf("name of %d bytes: store file %q has %d bytes", n, base, len(base))
		}
		if n <= 252 && base != name+".db" {
			t.Errorf("name of %d bytes: store file %q, want %s.db", n, base, name)
		}
		if StorePath(dir, name) != path {
			t.Error("StorePath is not deterministic")
		}
		if other, ok := seen[base]; ok {
			t.Errorf("%q and %q share the store file %s", name, other, base)
		}
		seen[base] = name
		if p := tempPrefix(base); len(p)+10 > nameMax {
			t.Errorf("temporary name prefix %q too long", p)
		}
		s, err := Open(path, OpenOptions{Create: true, LockTimeout: time.Second})
		if err != nil {
			t.Fatalf("Open of a store for a %d-byte network name: %v", n, err)
		}
		update(t, s, func(tx *Tx) error { return tx.SetNetwork(name) })
		view(t, s, func(tx *Tx) error {
			if tx.Network() != name {
				t.Errorf("Network() = %q", tx.Network())
			}
			return nil
		})
		s.Close()
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if isTempName(e.Name()) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// Temporary files of a first use killed midway are removed once old enough;
// young ones (a creator at work) and other files are kept.
func TestCleanStaleTemp(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * StaleTempAge)
	files := map[string]bool{ // name -> removed
		tempPrefix("net1.db") + "123456":   true,
		".net1.db.new-3847561":             true, // an earlier version's name
		tempPrefix("net2.db") + "999":      false,
		"net1.db":                          false,
		".kick":                            false,
		".net1.db.new-x":                   false,
		"notes.new-1":                      false,
		tempPrefix("net3.db") + "77-young": false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(name, "young") && name != tempPrefix("net2.db")+"999" {
			os.Chtimes(filepath.Join(dir, name), old, old)
		}
	}
	// net2's temp file is young; "x" and "notes" do not match.
	removed, err := CleanStaleTemp(dir, StaleTempAge, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := errors.Is(err, os.ErrNotExist); gone != want {
			t.Errorf("%s: removed = %v, want %v", name, gone, want)
		}
	}
	if len(removed) != 2 {
		t.Errorf("removed %v", removed)
	}
	// First use of a network cleans too.
	stale := filepath.Join(dir, tempPrefix("net4.db")+"1")
	os.WriteFile(stale, nil, 0o600)
	os.Chtimes(stale, old, old)
	s, err := Open(StorePath(dir, "net4"), OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("first use left the stale temporary file: %v", err)
	}
}

// Podman after a switch to hostlease tears containers down with its cached
// host-local config: host-local's DEL removes the file, and hostlease then
// releases the imported record.
func TestReleaseVanishedHostLocal(t *testing.T) {
	hl := filepath.Join(t.TempDir(), "net1")
	os.MkdirAll(hl, 0o755)
	for ip, owner := range map[string]string{"10.0.0.2": "p1\r\neth0", "10.0.0.3": "p2\r\neth0", "10.0.0.4": "p3"} {
		os.WriteFile(filepath.Join(hl, ip), []byte(owner), 0o644)
	}
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		n, err := tx.MigrateOnce(hl, "net1", []StoredRangeSet{set4}, testTime)
		if n != 3 {
			t.Errorf("imported %d", n)
		}
		return err
	})
	run := func() []string {
		var got []string
		update(t, s, func(tx *Tx) error {
			recs, err := ReleaseVanishedHostLocal(tx, hl, testTime)
			got = ips(recs)
			return err
		})
		return got
	}
	if got := run(); len(got) != 0 {
		t.Errorf("released %v while every file is there", got)
	}
	os.Remove(filepath.Join(hl, "10.0.0.3"))
	if got := run(); !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Errorf("released %v, want 10.0.0.3 (its file is gone)", got)
	}
	if acts := auditActions(t, s); !slices.Contains(acts, AuditHostLocalGone) {
		t.Errorf("no %s audit event: %v", AuditHostLocalGone, acts)
	}
	// An imported record released by hostlease's own DEL leaves the index.
	release(t, s, "p1", "eth0")
	// A missing host-local dir proves nothing.
	os.Remove(filepath.Join(hl, "10.0.0.4"))
	os.Rename(hl, hl+".gone")
	if got := run(); len(got) != 0 {
		t.Errorf("released %v with the host-local dir missing", got)
	}
	os.Rename(hl+".gone", hl)
	if got := run(); !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Errorf("released %v, want 10.0.0.4", got)
	}
	view(t, s, func(tx *Tx) error {
		if tx.HasImported() {
			t.Error("imported index not empty after every imported record went")
		}
		return nil
	})
	// An address an imported record had is now an ordinary one: not released.
	mustGet(t, s, []StoredRangeSet{set4}, "new", "10.0.0.3")
	if got := run(); len(got) != 0 {
		t.Errorf("released %v: not imported", got)
	}
	consistent(t, s)
}

// A page bbolt only meets when a transaction reads it (a leaf with a zeroed
// type) is ErrStorePageDamaged, not ErrStoreUnreadable: the store opens, and
// the daemon must not rebuild it (errors.go).
func TestZeroedLeafPageIsPageDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	os.WriteFile(path, realStore(t, 600), 0o600)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	db.View(func(btx *bolt.Tx) error { root = uint64(btx.Bucket(bucketAllocs).RootPage()); return nil })
	pageSize := db.Info().PageSize
	db.Close()
	data, _ := os.ReadFile(path)
	branch := data[int(root)*pageSize:]
	if flags := binary.LittleEndian.Uint16(branch[8:]); flags != 0x01 {
		t.Fatalf("allocs root page flags %#x, want a branch page", flags)
	}
	count := int(binary.LittleEndian.Uint16(branch[10:]))
	// The last child: a leaf page holding the highest addresses.
	leaf := binary.LittleEndian.Uint64(branch[16+16*(count-1)+8:])
	binary.LittleEndian.PutUint16(data[int(leaf)*pageSize+8:], 0)
	os.WriteFile(path, data, 0o600)

	for _, ro := range []bool{false, true} {
		s, err := Open(path, OpenOptions{ReadOnly: ro})
		if err != nil {
			t.Fatalf("Open(readOnly=%v): %v; the damage is past the pages an open reads", ro, err)
		}
		err = s.View(func(tx *Tx) error { return tx.ForEach(func(*Record) error { return nil }) })
		s.Close()
		if !errors.Is(err, ErrStorePageDamaged) || errors.Is(err, ErrStoreUnreadable) || !IsDamage(err) {
			t.Errorf("reading every record: %v; want ErrStorePageDamaged only", err)
		}
	}
}

// needScan: when DEL finds nothing through the owner index, are the records
// read? Always in a small store or when the count is unknown; in a large one
// only when the counts disagree.
func TestNeedScan(t *testing.T) {
	cases := []struct {
		records int
		known   bool
		agree   bool
		want    bool
	}{
		{0, true, true, false},
		{0, true, false, true},
		{0, false, true, true},
		{3, true, true, true},
		{scanAlwaysBelow - 1, true, true, true},
		{scanAlwaysBelow, true, true, false},
		{scanAlwaysBelow, true, false, true},
		{65000, true, true, false},
		{65000, true, false, true},
		{65000, false, true, true},
	}
	for _, tc := range cases {
		called := false
		got := needScan(tc.records, tc.known, func() bool { called = true; return tc.agree })
		if got != tc.want {
			t.Errorf("needScan(%d, known=%v, agree=%v) = %v, want %v", tc.records, tc.known, tc.agree, got, tc.want)
		}
		if called && tc.known && tc.records > 0 && tc.records < scanAlwaysBelow {
			t.Errorf("needScan(%d) compared counts in a small store", tc.records)
		}
	}
}

// In a large store a misfiled index entry keeps the counts equal: DEL then
// trusts the index (the daemon's VerifyIndexes finds it); an entry lost is
// found by the counts.
func TestReleaseLargeStore(t *testing.T) {
	s := newStore(t)
	big := set(rng("10.1.0.0/20", "10.1.0.1", "10.1.15.254", "10.1.0.1"))
	update(t, s, func(tx *Tx) error {
		ip := netip.MustParseAddr("10.1.0.1")
		for i := range scanAlwaysBelow + 10 {
			ip = ip.Next()
			if err := tx.Put(rec(ip.String(), fmt.Sprint("c", i), "eth0")); err != nil {
				return err
			}
		}
		return tx.SetRangeSets([]StoredRangeSet{big})
	})
	victim := netip.MustParseAddr("10.1.0.12") // c10
	damage(t, s, func(tx *Tx) error { return tx.owners.Delete(append(ownerPrefix("c10", "eth0"), addrKey(victim)...)) })
	if got := release(t, s, "c10", "eth0"); !slices.Equal(got, []string{victim.String()}) {
		t.Fatalf("Release of a record whose index entry is lost in a large store: %v", got)
	}
	consistent(t, s)
	if got := release(t, s, "nobody", "eth0"); len(got) != 0 {
		t.Errorf("released %v for an unknown container", got)
	}
}
