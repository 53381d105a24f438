package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

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
				if !errors.Is(err, ErrUnreadable) {
					t.Fatalf("err = %v, want ErrUnreadable", err)
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
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("size %d: err = %v, want ErrUnreadable", size, err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, real[:size]) {
				t.Fatalf("size %d: failed Open modified the file", size)
			}
			unreadable++
			continue
		}
		count := 0
		err = s.View(func(tx *Tx) error {
			return tx.ForEach(func(*allocator.Record) error { count++; return nil })
		})
		s.Close()
		if errors.Is(err, ErrUnreadable) {
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

// A page bbolt only meets when a transaction reads it (a leaf with a zeroed
// type) is ErrPageDamaged, not ErrUnreadable: the store opens, and
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
		err = s.View(func(tx *Tx) error { return tx.ForEach(func(*allocator.Record) error { return nil }) })
		s.Close()
		if !errors.Is(err, ErrPageDamaged) || errors.Is(err, ErrUnreadable) || !IsDamage(err) {
			t.Errorf("reading every record: %v; want ErrPageDamaged only", err)
		}
	}
}

// An initialised store whose allocs bucket is gone is unreadable (set aside
// and rebuilt), never served empty.
func TestStoreWithoutAllocsIsUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	s, err := Open(path, OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "a")
	damage(t, s, func(tx *Tx) error { return tx.btx.DeleteBucket(bucketAllocs) })
	s.Close()
	for _, o := range []OpenOptions{{}, {ReadOnly: true}} {
		if _, err := Open(path, o); !errors.Is(err, ErrUnreadable) {
			t.Errorf("Open(%+v) of a store without its records: %v, want ErrUnreadable", o, err)
		}
	}
}
