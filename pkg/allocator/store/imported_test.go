package store

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// Podman after a switch to hostlease tears containers down with its cached
// host-local config: host-local's DEL removes the file, and hostlease then
// releases the imported record.
func TestReleaseVanishedHostLocal(t *testing.T) {
	hl := filepath.Join(t.TempDir(), "net1")
	os.MkdirAll(hl, 0o755)
	for ip, owner := range map[string]string{"10.0.0.2": "p1\r\neth0", "10.0.0.3": "p2\r\neth0", "10.0.0.4": "p3", "lock": ""} {
		os.WriteFile(filepath.Join(hl, ip), []byte(owner), 0o644)
	}
	s := newStore(t)
	update(t, s, func(tx *Tx) error {
		n, err := allocator.MigrateOnce(tx, hl, "net1", []allocator.StoredRangeSet{rangetest.Set4}, testTime)
		if n != 3 {
			t.Errorf("imported %d", n)
		}
		return err
	})
	run := func() []string {
		var got []string
		update(t, s, func(tx *Tx) error {
			recs, err := allocator.ReleaseHostLocalGone(tx, hl, allocator.ByPlugin, testTime)
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
	if acts := auditActions(t, s); !slices.Contains(acts, allocator.AuditHostLocalGone) {
		t.Errorf("no %s audit event: %v", allocator.AuditHostLocalGone, acts)
	}
	// An imported record released by hostlease's own DEL leaves the index.
	release(t, s, "p1", "eth0")
	// A missing host-local dir, or one without host-local's lock file (a
	// wipe, not host-local's DEL), proves nothing.
	os.Remove(filepath.Join(hl, "10.0.0.4"))
	os.Rename(hl, hl+".gone")
	if got := run(); len(got) != 0 {
		t.Errorf("released %v with the host-local dir missing", got)
	}
	os.Rename(hl+".gone", hl)
	os.Remove(filepath.Join(hl, "lock"))
	if got := run(); len(got) != 0 {
		t.Errorf("released %v with host-local's lock file gone", got)
	}
	os.WriteFile(filepath.Join(hl, "lock"), nil, 0o644)
	if got := run(); !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Errorf("released %v, want 10.0.0.4", got)
	}
	view(t, s, func(tx *Tx) error {
		if k, _ := tx.imported.Cursor().First(); k != nil {
			t.Error("imported index not empty after every imported record went")
		}
		return nil
	})
	// An address an imported record had is now an ordinary one: not released.
	mustGet(t, s, []allocator.StoredRangeSet{rangetest.Set4}, "new", "10.0.0.3")
	if got := run(); len(got) != 0 {
		t.Errorf("released %v: not imported", got)
	}
	consistent(t, s)
}
