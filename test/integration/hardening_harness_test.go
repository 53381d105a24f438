package integration

// Issue 9, the plugin's side: real plugin processes against stores damaged
// the way bit rot, a bad restore or a bug leave them, and against an
// environment that refuses writes (read-only file system, immutable file,
// too many open files). Each test prints what it could not run and why.
// This file holds their shared network (hardNet) and raw store access; the
// tests are in hardening_{damage,env,paths,config,migration}_test.go.

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// hardNet is a store of n containers c000.. made by real ADDs on 10.81.0.0/24.
type hardNet struct {
	ctx     context.Context
	network string
	dir     string
	path    string
	conf    []byte
	ips     map[string]netip.Addr // container -> address
}

func newHardNet(t *testing.T, network string, n int) *hardNet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	h := &hardNet{ctx: ctx, network: network, dir: t.TempDir(), ips: map[string]netip.Addr{}}
	h.conf = ipamConf(t, network, h.dir, "10.81.0.0/24")
	h.path = store.FilePath(h.dir, network)
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		h.ips[id] = h.mustAdd(t, id)
	}
	return h
}

func (h *hardNet) call(cmd, id string) call {
	return call{Command: cmd, ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id,
		Args: podArgs("ns", "pod-"+id, "uid-"+id, id)}
}

func (h *hardNet) run(cmd, id string) outcome { return runPlugin(h.ctx, h.call(cmd, id), h.conf) }

func (h *hardNet) mustAdd(t *testing.T, id string) netip.Addr {
	t.Helper()
	o := h.run("ADD", id)
	if !o.OK() {
		t.Fatalf("ADD %s: %v", id, o)
	}
	got, err := resultIPs(o.Stdout)
	if err != nil || len(got) != 1 {
		t.Fatalf("ADD %s result: %v %v", id, got, err)
	}
	return got[0].Addr()
}

// raw changes the store with bbolt directly, under its lock, bypassing
// pkg/allocator (as damage does).
func (h *hardNet) raw(t *testing.T, fn func(btx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(h.path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatalf("damaging the store: %v", err)
	}
}

// audit returns the store's audit actions.
func (h *hardNet) audit(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, ev := range readStoreLenient(t, h.path).audit {
		out = append(out, ev.Action)
	}
	return out
}

type lenientSnap struct {
	records []*allocator.Record
	damaged []allocator.DamagedRecord
	audit   []allocator.AuditEvent
}

// readStoreLenient reads a store that may hold damaged records.
func readStoreLenient(t *testing.T, path string) lenientSnap {
	t.Helper()
	s, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer s.Close()
	var snap lenientSnap
	if err := s.View(func(tx *store.Tx) error {
		snap.damaged = tx.DamagedRecords()
		if err := tx.ForEach(func(r *allocator.Record) error { snap.records = append(snap.records, r); return nil }); err != nil {
			return err
		}
		var err error
		snap.audit, err = tx.AuditLog(1 << 20)
		return err
	}); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return snap
}

func addrKeyOf(ip netip.Addr) []byte {
	if ip.Is4() {
		b := ip.As4()
		return append([]byte{4}, b[:]...)
	}
	b := ip.As16()
	return append([]byte{6}, b[:]...)
}
