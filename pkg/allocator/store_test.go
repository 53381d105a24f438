package allocator

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// newStore opens a fresh store in a temporary directory.
func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "net1.db"), OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func update(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func rec(ip, id, ifname string) *Record {
	return &Record{IP: netip.MustParseAddr(ip), ContainerID: id, IfName: ifname, State: StatePending, Created: time.Unix(1700000000, 0).UTC()}
}

func ips(recs []*Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.IP.String())
	}
	return out
}

func TestOpenCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := StorePath(dir, "net1")
	if _, err := Open(path, OpenOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open without Create on a missing store: err = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open without Create made %s", dir)
	}
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatalf("Open with Create: %v", err)
	}
	if s.Path() != path {
		t.Errorf("Path = %q, want %q", s.Path(), path)
	}
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "c1", "eth0")) })
	s.Close()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "net1.db" {
		t.Errorf("data dir holds %v, want only net1.db", entries)
	}
	s, err = Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen read-only: %v", err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		if !tx.Taken(netip.MustParseAddr("10.0.0.2")) || tx.Count() != 1 {
			t.Errorf("reopened store lost its record (count %d)", tx.Count())
		}
		return nil
	})
}

// Pods starting at once on a fresh node all open a store that does not exist
// yet. None of them may see a half-created (empty) file and fail as if the
// store had been lost.
func TestOpenConcurrentFirstUse(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "net1.db")
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				s, err := Open(path, OpenOptions{Create: true, LockTimeout: 5 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				defer s.Close()
				errs <- s.Update(func(tx *Tx) error { return tx.Put(rec(fmt.Sprintf("10.0.0.%d", i+2), fmt.Sprint("c", i), "eth0")) })
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent first Open/Update: %v", round, err)
			}
		}
		s, err := Open(path, OpenOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		view(t, s, func(tx *Tx) error {
			if tx.Count() != n {
				t.Errorf("round %d: %d records, want %d", round, tx.Count(), n)
			}
			return nil
		})
		s.Close()
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Errorf("round %d: data dir holds %d files, want only the store", round, len(entries))
		}
	}
}

// snapshot is a file's content and modification time.
type snapshot struct {
	data  []byte
	mtime time.Time
}

func snap(t *testing.T, path string) snapshot {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("store file: %v", err)
	}
	fi, _ := os.Stat(path)
	return snapshot{data, fi.ModTime()}
}

// realStore writes a store holding n records and returns its bytes.
func realStore(t *testing.T, n int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "real.db")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(tx *Tx) error {
		ip := netip.MustParseAddr("10.0.0.0")
		for i := range n {
			ip = ip.Next()
			if err := tx.Put(rec(ip.String(), fmt.Sprint("container-", i), "eth0")); err != nil {
				return err
			}
		}
		return tx.SetLastReserved(0, ip)
	})
	s.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestOpenUnreadable(t *testing.T) {
	const n = 600
	real := realStore(t, n)
	r := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(r.Uint32())
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"empty file", []byte{}},
		{"garbage bytes", garbage},
		{"text", []byte("this is not a bbolt file\n")},
	}
	// Truncations that cut into the pages in use.
	for _, size := range []int{1, 100, 4095, 4096, 8191, 8192, 8193, 12288, 20481, 65536, len(real) / 4} {
		cases = append(cases, struct {
			name string
			data []byte
		}{fmt.Sprintf("truncated at %d of %d", size, len(real)), real[:size]})
	}
	for _, tc := range cases {
		for _, mode := range []OpenOptions{{Create: true}, {}, {ReadOnly: true}} {
			t.Run(fmt.Sprintf("%s/readonly=%v,create=%v", tc.name, mode.ReadOnly, mode.Create), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "net1.db")
				if err := os.WriteFile(path, tc.data, 0o600); err != nil {
					t.Fatal(err)
				}
				old := time.Now().Add(-time.Hour)
				os.Chtimes(path, old, old)
				before := snap(t, path)
				mode.LockTimeout = time.Second
				s, err := Open(path, mode)
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded on an unreadable store")
				}
				if !errors.Is(err, ErrStoreUnreadable) {
					t.Fatalf("err = %v, want ErrStoreUnreadable", err)
				}
				after := snap(t, path)
				if !bytes.Equal(before.data, after.data) || !before.mtime.Equal(after.mtime) {
					t.Errorf("failed Open modified the file (%d -> %d bytes)", len(before.data), len(after.data))
				}
				entries, _ := os.ReadDir(filepath.Dir(path))
				if len(entries) != 1 {
					t.Errorf("failed Open left %d files behind", len(entries))
				}
			})
		}
	}
}

// Whatever the truncation point, a store either opens with every record or
// is reported unreadable and left as it was; it never opens with records
// silently missing.
func TestOpenTruncatedNeverLosesSilently(t *testing.T) {
	const n = 600
	real := realStore(t, n)
	unreadable, intact := 0, 0
	dir := t.TempDir()
	for size := 1; size < len(real); size += 16381 { // a prime step hits page bounds and interiors
		path := filepath.Join(dir, fmt.Sprintf("t%d.db", size))
		if err := os.WriteFile(path, real[:size], 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, OpenOptions{})
		if err != nil {
			if !errors.Is(err, ErrStoreUnreadable) {
				t.Fatalf("size %d: err = %v, want ErrStoreUnreadable", size, err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, real[:size]) {
				t.Fatalf("size %d: failed Open modified the file", size)
			}
			unreadable++
			continue
		}
		count := 0
		err = s.View(func(tx *Tx) error {
			return tx.ForEach(func(*Record) error { count++; return nil })
		})
		s.Close()
		if errors.Is(err, ErrStoreUnreadable) {
			unreadable++
			continue
		}
		if err != nil || count != n {
			t.Fatalf("size %d of %d: opened with %d of %d records (err %v)", size, len(real), count, n, err)
		}
		intact++
	}
	if unreadable == 0 {
		t.Errorf("no truncation was detected (%d intact)", intact)
	}
}

func TestOpenLockTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net1.db")
	holder, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []OpenOptions{{LockTimeout: 150 * time.Millisecond}, {LockTimeout: 150 * time.Millisecond, ReadOnly: true}} {
		start := time.Now()
		s, err := Open(path, mode)
		if err == nil {
			s.Close()
			t.Fatalf("readOnly=%v: Open succeeded while another handle holds the lock", mode.ReadOnly)
		}
		if !errors.Is(err, ErrLockTimeout) {
			t.Fatalf("readOnly=%v: err = %v, want ErrLockTimeout", mode.ReadOnly, err)
		}
		if errors.Is(err, ErrStoreUnreadable) {
			t.Errorf("a busy store was reported unreadable: %v", err)
		}
		// bbolt polls every 50ms and may give up up to one poll early.
		if waited := time.Since(start); waited < 90*time.Millisecond || waited > 5*time.Second {
			t.Errorf("readOnly=%v: gave up after %v, want about the 150ms timeout", mode.ReadOnly, waited)
		}
	}
	// The lock is released on Close: a waiting opener gets in.
	done := make(chan error, 1)
	go func() {
		s, err := Open(path, OpenOptions{LockTimeout: 5 * time.Second})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	holder.Close()
	if err := <-done; err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
}

// checkIndex verifies that the owners index holds exactly one entry per
// record, under that record's owner.
func checkIndex(t *testing.T, tx *Tx) {
	t.Helper()
	want := map[string]bool{}
	if err := tx.ForEach(func(r *Record) error {
		want[string(append(ownerPrefix(r.ContainerID, r.IfName), addrKey(r.IP)...))] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	tx.owners.ForEach(func(k, _ []byte) error { got[string(k)] = true; return nil })
	for k := range want {
		if !got[k] {
			t.Errorf("owners index lacks %q", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("owners index has a stale entry %q", k)
		}
	}
}

// TestOwnersIndexCollisions: the owners index is keyed by a hash of the
// owner; with every owner hashing alike, lookups, overwrites and deletes
// still see each owner's records only.
func TestOwnersIndexCollisions(t *testing.T) {
	defer func(h func(string, string) uint64) { ownerHash = h }(ownerHash)
	ownerHash = func(string, string) uint64 { return 42 }
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*Record{rec("10.0.0.2", "c1", "eth0"), rec("10.0.0.3", "c2", "eth0"), rec("10.0.0.4", "c1", "net1"), rec("10.0.0.5", "c1", "eth0")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		// Put never takes another owner's address; Replace does.
		if err := tx.Put(rec("10.0.0.3", "c1", "eth0")); !errors.Is(err, ErrAddressHeld) {
			t.Errorf("Put over another owner's record: %v, want ErrAddressHeld", err)
		}
		// 10.0.0.3 changes hands, 10.0.0.5 is released.
		if prev, _, err := tx.Replace(rec("10.0.0.3", "c1", "eth0")); err != nil || prev == nil || prev.ContainerID != "c2" {
			t.Errorf("Replace = %+v, %v; want c2's record", prev, err)
		}
		if _, err := tx.Delete(netip.MustParseAddr("10.0.0.5")); err != nil {
			return err
		}
		for _, tc := range []struct {
			id, ifname string
			want       []string
		}{{"c1", "eth0", []string{"10.0.0.2", "10.0.0.3"}}, {"c2", "eth0", nil}, {"c1", "net1", []string{"10.0.0.4"}}, {"c3", "eth0", nil}} {
			recs, err := tx.ByOwner(tc.id, tc.ifname)
			if err != nil {
				return err
			}
			if got := ips(recs); !slices.Equal(got, tc.want) {
				t.Errorf("ByOwner(%s, %s) = %v, want %v", tc.id, tc.ifname, got, tc.want)
			}
		}
		checkIndex(t, tx)
		return nil
	})
}

func TestOwnersIndex(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		for _, r := range []*Record{rec("10.0.0.3", "c1", "eth0"), rec("fd00::3", "c1", "eth0"), rec("10.0.0.2", "c1", "eth0"),
			rec("10.0.0.4", "c1", "net1"), rec("10.0.0.5", "c10", "eth0"), rec("10.0.0.6", "c1", "")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	byOwner := func(tx *Tx, id, ifname string) []string {
		recs, err := tx.ByOwner(id, ifname)
		if err != nil {
			t.Fatal(err)
		}
		return ips(recs)
	}
	view(t, s, func(tx *Tx) error {
		eq(t, "ByOwner(c1, eth0)", byOwner(tx, "c1", "eth0"), []string{"10.0.0.2", "10.0.0.3", "fd00::3"})
		eq(t, "ByOwner(c1, net1)", byOwner(tx, "c1", "net1"), []string{"10.0.0.4"})
		eq(t, "ByOwner(c1, \"\")", byOwner(tx, "c1", ""), []string{"10.0.0.6"})
		eq(t, "ByOwner(c10, eth0)", byOwner(tx, "c10", "eth0"), []string{"10.0.0.5"})
		eq(t, "ByOwner(c, eth0)", byOwner(tx, "c", "eth0"), []string{})
		checkIndex(t, tx)
		return nil
	})
	update(t, s, func(tx *Tx) error {
		// Put refuses to overwrite another owner; Replace moves the address.
		if err := tx.Put(rec("10.0.0.3", "c2", "eth0")); !errors.Is(err, ErrAddressHeld) {
			t.Errorf("Put over c1's record: %v, want ErrAddressHeld", err)
		}
		if _, _, err := tx.Replace(rec("10.0.0.3", "c2", "eth0")); err != nil {
			return err
		}
		// Same owner, new state: one index entry.
		r := rec("10.0.0.2", "c1", "eth0")
		r.State = StateCommitted
		if err := tx.Put(r); err != nil {
			return err
		}
		if got, err := tx.Delete(netip.MustParseAddr("fd00::3")); err != nil || got == nil || got.ContainerID != "c1" {
			t.Errorf("Delete(fd00::3) = %+v, %v", got, err)
		}
		if got, err := tx.Delete(netip.MustParseAddr("10.0.0.99")); err != nil || got != nil {
			t.Errorf("Delete of a free address = %+v, %v; want nil, nil", got, err)
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		eq(t, "ByOwner(c1, eth0)", byOwner(tx, "c1", "eth0"), []string{"10.0.0.2"})
		eq(t, "ByOwner(c2, eth0)", byOwner(tx, "c2", "eth0"), []string{"10.0.0.3"})
		r, _ := tx.Get(netip.MustParseAddr("10.0.0.2"))
		if r == nil || r.State != StateCommitted {
			t.Errorf("Get(10.0.0.2) = %+v, want committed", r)
		}
		checkIndex(t, tx)
		eq(t, "Count", tx.Count(), 5)
		return nil
	})
}

// TestOwnersIndexRandom drives Put/Delete/overwrite at random and compares
// ByOwner with a map model after every transaction.
func TestOwnersIndexRandom(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 7))
	s := newStore(t)
	model := map[netip.Addr][2]string{}
	owners := [][2]string{{"a", "eth0"}, {"a", "eth1"}, {"a", ""}, {"ab", "eth0"}, {"b", "eth0"}}
	for step := range 300 {
		update(t, s, func(tx *Tx) error {
			for range 1 + r.IntN(4) {
				ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(24))})
				if r.IntN(3) == 0 {
					if _, err := tx.Delete(ip); err != nil {
						return err
					}
					delete(model, ip)
					continue
				}
				o := owners[r.IntN(len(owners))]
				err := tx.Put(rec(ip.String(), o[0], o[1]))
				if held, ok := model[ip]; ok && held != o {
					if !errors.Is(err, ErrAddressHeld) {
						t.Fatalf("seed %d: Put of %s for %v over %v's record: %v, want ErrAddressHeld", seed, ip, o, held, err)
					}
					if r.IntN(2) == 0 {
						continue
					}
					_, _, err = tx.Replace(rec(ip.String(), o[0], o[1]))
				}
				if err != nil {
					return err
				}
				model[ip] = o
			}
			return nil
		})
		view(t, s, func(tx *Tx) error {
			for _, o := range owners {
				var want []string
				for ip, mo := range model {
					if mo == o {
						want = append(want, ip.String())
					}
				}
				slices.SortFunc(want, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
				recs, err := tx.ByOwner(o[0], o[1])
				if err != nil {
					return err
				}
				if got := ips(recs); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("seed %d step %d: ByOwner(%q, %q) = %v, want %v", seed, step, o[0], o[1], got, want)
				}
			}
			if tx.Count() != len(model) {
				t.Fatalf("seed %d step %d: Count = %d, want %d", seed, step, tx.Count(), len(model))
			}
			return nil
		})
	}
	view(t, s, func(tx *Tx) error { checkIndex(t, tx); return nil })
}

func TestRecordFromNewerSchemaIsRefused(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		if err := tx.allocs.Put(addrKey(netip.MustParseAddr("10.0.0.2")), []byte(`{"v":2,"ip":"10.0.0.2","containerID":"c1"}`)); err != nil {
			return err
		}
		// A binary value whose format byte is newer than this binary's.
		newer := appendRecord(&Record{IP: netip.MustParseAddr("10.0.0.3"), ContainerID: "c2"})
		newer[0] = binaryFormat + 1
		return tx.allocs.Put(addrKey(netip.MustParseAddr("10.0.0.3")), newer)
	})
	view(t, s, func(tx *Tx) error {
		if r, err := tx.Get(netip.MustParseAddr("10.0.0.2")); err == nil {
			t.Errorf("Get decoded a JSON record claiming v2: %+v", r)
		}
		if r, err := tx.Get(netip.MustParseAddr("10.0.0.3")); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Errorf("Get of a record in a newer binary format = %+v, %v; want an error saying it is newer", r, err)
		}
		n := 0
		if err := tx.ForEach(func(*Record) error { n++; return nil }); err != nil || n != 0 {
			t.Errorf("ForEach visited %d records (err %v); want the two undecodable ones skipped", n, err)
		}
		if d := tx.DamagedSeen(); len(d) != 2 {
			t.Errorf("DamagedSeen = %v, want both records", d)
		}
		if d := tx.DamagedRecords(); len(d) != 2 || d[1].ContainerID != "" {
			t.Errorf("DamagedRecords = %+v, want both, no owner guessed from a format this binary does not know", d)
		}
		return nil
	})
}

func TestAuditLogBoundedAndOrdered(t *testing.T) {
	s := newStore(t)
	const extra = 3*auditPrune + 37
	t0 := time.Unix(1700000000, 0).UTC()
	// Many transactions, several events each, as DELs would write them.
	for i := 0; i < auditLimit+extra; {
		update(t, s, func(tx *Tx) error {
			for j := 0; j < 50 && i < auditLimit+extra; j++ {
				if err := tx.Audit(AuditEvent{Time: t0.Add(time.Duration(i) * time.Second), Action: "release", ContainerID: fmt.Sprint("c", i)}); err != nil {
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
		all, err := tx.AuditLog(1 << 20)
		if err != nil {
			return err
		}
		if len(all) != n {
			t.Fatalf("AuditLog returned %d events, the bucket holds %d", len(all), n)
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
	path := StorePath(dir, "net1")
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
		eq(t, "Exhaustions", ex, map[int]Exhaustion{
			0: {Count: 2, Last: t2, RangeSet: "10.0.0.1-10.0.0.14"},
			1: {Count: 1, Last: t1, RangeSet: "fd00::1-fd00::f"},
		})
		return nil
	})
}

func TestLastReservedAndRangeSets(t *testing.T) {
	dir := t.TempDir()
	path := StorePath(dir, "net1")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	sets := []StoredRangeSet{
		set(rng("10.0.0.0/28", "10.0.0.1", "10.0.0.14", "10.0.0.1"), rng("10.0.1.0/28", "10.0.1.4", "10.0.1.8", "")),
		set(rng("fd00::/120", "fd00::1", "fd00::ff", "fd00::1")),
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
	path := StorePath(dir, "net1")
	sets := []StoredRangeSet{set(rng("10.0.0.0/28", "10.0.0.1", "10.0.0.14", "10.0.0.1"))}
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
			n, err = tx.MigrateOnce(hl, "net1", sets, now)
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
	s2, err := Open(StorePath(dir2, "net1"), OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	update(t, s2, func(tx *Tx) error {
		if n, err := tx.MigrateOnce(filepath.Join(dir2, "net1"), "net1", sets, now); n != 0 || err != nil {
			t.Errorf("MigrateOnce without host-local state = %d, %v", n, err)
		}
		return nil
	})
	os.MkdirAll(filepath.Join(dir2, "net1"), 0o755)
	os.WriteFile(filepath.Join(dir2, "net1", "10.0.0.9"), []byte("c9\r\neth0"), 0o600)
	update(t, s2, func(tx *Tx) error {
		if n, err := tx.MigrateOnce(filepath.Join(dir2, "net1"), "net1", sets, now); n != 0 || err != nil {
			t.Errorf("second MigrateOnce = %d, %v; want 0", n, err)
		}
		return nil
	})
}

// TestTakenIndexFollowsRecords: the bitmap the address choice reads holds
// exactly the reserved addresses through puts, overwrites and deletes, and a
// store that lost it gets it rebuilt from the records on open.
func TestTakenIndexFollowsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	err = s.Update(func(tx *Tx) error {
		for _, ip := range []netip.Addr{a, b, a} { // a twice: an overwrite
			if err := tx.Put(&Record{IP: ip, ContainerID: "c", IfName: "eth0"}); err != nil {
				return err
			}
		}
		if !tx.Taken(a) || !tx.Taken(b) || tx.Count() != 2 {
			t.Errorf("after puts: Taken(a)=%v Taken(b)=%v Count=%d, want true true 2", tx.Taken(a), tx.Taken(b), tx.Count())
		}
		if _, err := tx.Delete(a); err != nil {
			return err
		}
		if tx.Taken(a) || !tx.Taken(b) || tx.Count() != 1 {
			t.Errorf("after delete: Taken(a)=%v Taken(b)=%v Count=%d, want false true 1", tx.Taken(a), tx.Taken(b), tx.Count())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Damage: drop the index, then reopen.
	if err := s.db.Update(func(btx *bolt.Tx) error { return btx.DeleteBucket(bucketTaken) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.View(func(tx *Tx) error {
		if !tx.Taken(b) || tx.Count() != 1 {
			t.Errorf("after the rebuild: Taken(b)=%v Count=%d, want true 1", tx.Taken(b), tx.Count())
		}
		return nil
	})
}

// TestUpdateWithoutWritesCommitsNothing: a read-write transaction that writes
// nothing (a repeated DEL, an unknown container) is rolled back, so the file
// is not touched (no commit, no fdatasync); one that writes is committed.
func TestUpdateWithoutWritesCommitsNothing(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "c1", "eth0")) })
	txid := func() (id int) {
		if err := s.db.View(func(btx *bolt.Tx) error { id = btx.ID(); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	before, beforeBytes := txid(), readFile(t, s.Path())
	update(t, s, func(tx *Tx) error {
		recs, err := Release(tx, "unknown", "eth0", "DEL", "plugin", time.Now())
		if len(recs) != 0 {
			t.Errorf("released %v", ips(recs))
		}
		return err
	})
	if after := txid(); after != before || !bytes.Equal(readFile(t, s.Path()), beforeBytes) {
		t.Errorf("a transaction that wrote nothing was committed: txid %d -> %d, file changed %v", before, after, !bytes.Equal(readFile(t, s.Path()), beforeBytes))
	}
	update(t, s, func(tx *Tx) error {
		_, err := Release(tx, "c1", "eth0", "DEL", "plugin", time.Now())
		return err
	})
	if after := txid(); after != before+1 {
		t.Errorf("a release was not committed: txid %d -> %d", before, after)
	}
	view(t, s, func(tx *Tx) error {
		if tx.Count() != 0 {
			t.Errorf("Count %d after the release", tx.Count())
		}
		return nil
	})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
