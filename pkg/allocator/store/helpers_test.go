package store

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
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

func rec(ip, id, ifname string) *allocator.Record {
	return &allocator.Record{IP: netip.MustParseAddr(ip), ContainerID: id, IfName: ifname, State: allocator.StatePending, Created: time.Unix(1700000000, 0).UTC()}
}

func ips(recs []*allocator.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.IP.String())
	}
	return out
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

// checkIndex verifies that the owners index holds exactly one entry per
// record, under that record's owner.
func checkIndex(t *testing.T, tx *Tx) {
	t.Helper()
	want := map[string]bool{}
	if err := tx.ForEach(func(r *allocator.Record) error {
		want[string(append(ownerPrefix(r.Attachment()), addrKey(r.IP)...))] = true
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

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

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
	if err := s.db.Update(func(btx *bolt.Tx) error { return fn(wrapTx(btx, "")) }); err != nil {
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
		// Decodes, but names another record's address: a release would
		// delete that record and its index entries.
		"names another address": appendRecord(rec("10.0.0.2", "b", "eth0")),
	}
}

// queueLen is the number of entries in the audit queue.
func queueLen(tx *Tx) int {
	n := 0
	if tx.auditq != nil {
		_ = tx.auditq.ForEach(func(_, _ []byte) error { n++; return nil })
	}
	return n
}

// byOwner is the owner index's answer for (containerID, ifname), unverified.
func (tx *Tx) byOwner(containerID, ifname string) ([]*allocator.Record, error) {
	return tx.Records(allocator.Query{Attachment: &allocator.Attachment{ContainerID: containerID, IfName: ifname}})
}
