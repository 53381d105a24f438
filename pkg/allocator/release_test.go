package allocator

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestRelease(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx Store) error {
		for _, r := range []*Record{rec("10.0.0.2", "c1", "eth0"), rec("fd00::2", "c1", "eth0"), rec("10.0.0.3", "c1", "net1"),
			rec("10.0.0.4", "legacy", ""), rec("10.0.0.5", "mixed", ""), rec("10.0.0.6", "mixed", "eth0")} {
			r.PodNamespace, r.PodName = "ns", "p"
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	eq(t, "DEL c1/eth0", release(t, s, "c1", "eth0"), []string{"10.0.0.2", "fd00::2"})
	eq(t, "DEL c1/eth0 again", release(t, s, "c1", "eth0"), []string{})
	eq(t, "DEL unknown", release(t, s, "nobody", "eth0"), []string{})
	eq(t, "c1/net1 untouched", held(t, s, "c1", "net1"), []string{"10.0.0.3"})
	// An ID-only record is released by a DEL for any interface of its container.
	eq(t, "DEL legacy/eth0", release(t, s, "legacy", "eth0"), []string{"10.0.0.4"})
	// host-local falls back to ID-only records only when the attachment has none.
	eq(t, "DEL mixed/eth0", release(t, s, "mixed", "eth0"), []string{"10.0.0.6"})
	eq(t, "DEL mixed/eth0 again", release(t, s, "mixed", "eth0"), []string{"10.0.0.5"})
	view(t, s, func(tx Store) error {
		eq(t, "left", tx.(*memStore).count(), 1)
		log, err := tx.(*memStore).auditLog(100)
		if err != nil {
			return err
		}
		if len(log) != 5 {
			t.Fatalf("audit log has %d events, want 5: %+v", len(log), log)
		}
		eq(t, "first audit event", log[0], AuditEvent{Time: testTime, Action: "release", Reason: "DEL",
			IP: netip.MustParseAddr("10.0.0.2"), ContainerID: "c1", IfName: "eth0", Pod: "ns/p", By: "plugin"})
		return nil
	})
}

func TestMarkCommitted(t *testing.T) {
	s := newStore(t)
	sets := []StoredRangeSet{set4, set6}
	mustGet(t, s, sets, "c1")
	mustGet(t, s, sets, "c2")
	update(t, s, func(tx Store) error { return tx.Put(rec("10.0.0.6", "legacy", "")) })
	later := testTime.Add(time.Minute)
	commit := func(id, ifname string) int {
		var n int
		update(t, s, func(tx Store) error {
			var err error
			n, err = MarkCommitted(tx, Attachment{ContainerID: id, IfName: ifname}, later)
			return err
		})
		return n
	}
	eq(t, "Commit c1", commit("c1", "eth0"), 2)
	eq(t, "Commit c1 again", commit("c1", "eth0"), 0)
	eq(t, "Commit unknown", commit("c9", "eth0"), 0)
	eq(t, "Commit legacy", commit("legacy", "eth0"), 1)
	view(t, s, func(tx Store) error {
		return forEach(tx, func(r *Record) error {
			want := StatePending
			if r.ContainerID != "c2" {
				want = StateCommitted
			}
			if r.State != want || (want == StateCommitted) != r.Committed.Equal(later) {
				t.Errorf("%s (%s): state %s committed %v, want %s", r.IP, r.ContainerID, r.State, r.Committed, want)
			}
			return nil
		})
	})
}

func TestGarbageCollect(t *testing.T) {
	s := newStore(t)
	update(t, s, func(tx Store) error {
		for _, r := range []*Record{rec("10.0.0.2", "c1", "eth0"), rec("fd00::2", "c1", "eth0"), rec("10.0.0.3", "c1", "net1"),
			rec("10.0.0.4", "c2", "eth0"), rec("10.0.0.5", "c3", ""), rec("10.0.0.6", "c4", "")} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	var gone []*Record
	update(t, s, func(tx Store) error {
		var err error
		gone, err = GarbageCollect(tx, []Attachment{{"c1", "eth0"}, {"c3", "eth0"}, {"c9", "eth0"}}, testTime)
		return err
	})
	eq(t, "released", ips(gone), []string{"10.0.0.3", "10.0.0.4", "10.0.0.6"})
	view(t, s, func(tx Store) error {
		var left []string
		forEach(tx, func(r *Record) error { left = append(left, r.IP.String()); return nil })
		eq(t, "kept", left, []string{"10.0.0.2", "10.0.0.5", "fd00::2"})
		log, _ := tx.(*memStore).auditLog(10)
		if len(log) != 3 || log[0].Action != "gc" || log[0].By != "plugin" || !strings.Contains(log[0].Reason, "valid-attachments") {
			t.Errorf("audit log = %+v", log)
		}
		return nil
	})
	// An empty list releases everything: the caller must refuse a missing list.
	update(t, s, func(tx Store) error {
		gone, _ = GarbageCollect(tx, nil, testTime)
		return nil
	})
	eq(t, "released with an empty list", len(gone), 3)
}
