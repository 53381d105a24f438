package allocator

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// memStore is an in-memory Store for testing allocation policy without a
// file, as host-local tests its allocator against a fake store. It keeps
// records and nothing derived, so its indexes cannot disagree: index damage
// and durability are the store package's tests. Records are copied in and
// out, as a store decodes a fresh value on every read.
type memStore struct {
	network      string
	sets         []StoredRangeSet
	last         map[int]netip.Addr
	exhaustion   map[int]Exhaustion
	migrated     bool
	export       *HostLocalExport
	records      map[netip.Addr]Record
	damaged      map[netip.Addr]DamagedRecord
	audit        []AuditEvent
	repairs      int
	failPutAfter int // > 0: Put fails once this many Puts succeeded (a write error)
	puts         int
}

var _ Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{last: map[int]netip.Addr{}, exhaustion: map[int]Exhaustion{},
		records: map[netip.Addr]Record{}, damaged: map[netip.Addr]DamagedRecord{}}
}

// clone is a deep copy of the store: Update runs on one and keeps it only
// when fn succeeds, as a transaction does.
func (m *memStore) clone() *memStore {
	c := *m
	c.sets = slices.Clone(m.sets)
	c.last, c.exhaustion = maps.Clone(m.last), maps.Clone(m.exhaustion)
	c.records, c.damaged = maps.Clone(m.records), maps.Clone(m.damaged)
	c.audit = slices.Clone(m.audit)
	return &c
}

// Update runs fn as one transaction: its writes are kept only when it returns nil.
func (m *memStore) Update(fn func(Store) error) error {
	c := m.clone()
	if err := fn(c); err != nil {
		return err
	}
	*m = *c
	return nil
}

// View runs fn on a copy that is thrown away.
func (m *memStore) View(fn func(Store) error) error { return fn(m.clone()) }

func (m *memStore) SetNetwork(name string) error { m.network = name; return nil }
func (m *memStore) SetRangeSets(sets []StoredRangeSet) error {
	m.sets = slices.Clone(sets)
	return nil
}
func (m *memStore) RangeSets() ([]StoredRangeSet, error) { return slices.Clone(m.sets), nil }
func (m *memStore) LastReserved(idx int) (netip.Addr, bool) {
	ip, ok := m.last[idx]
	return ip, ok
}
func (m *memStore) SetLastReserved(idx int, ip netip.Addr) error { m.last[idx] = ip; return nil }
func (m *memStore) RecordExhaustion(idx int, desc string, now time.Time) error {
	e := m.exhaustion[idx]
	e.Count++
	e.Last, e.RangeSet = now, desc
	m.exhaustion[idx] = e
	return nil
}
func (m *memStore) Migrated() bool                   { return m.migrated }
func (m *memStore) MarkMigrated(now time.Time) error { m.migrated = true; return nil }
func (m *memStore) HostLocalExport() (HostLocalExport, bool) {
	if m.export == nil {
		return HostLocalExport{}, false
	}
	return *m.export, true
}
func (m *memStore) SetHostLocalExport(e HostLocalExport) error { m.export = &e; return nil }

func (m *memStore) Taken(ip netip.Addr) bool { return m.HasRecord(ip) }
func (m *memStore) HasRecord(ip netip.Addr) bool {
	_, ok := m.records[ip]
	_, bad := m.damaged[ip]
	return ok || bad
}
func (m *memStore) Reserved() TakenIter {
	all := slices.Collect(maps.Keys(m.records))
	all = append(all, slices.Collect(maps.Keys(m.damaged))...)
	slices.SortFunc(all, netip.Addr.Compare)
	return newSliceIter(all)
}

func (m *memStore) Lookup(ip netip.Addr) (*Record, *DamagedRecord) {
	if d, ok := m.damaged[ip]; ok {
		return nil, &d
	}
	if r, ok := m.records[ip]; ok {
		return &r, nil
	}
	return nil, nil
}

// sorted returns copies of the records fn accepts, in address order.
func (m *memStore) sorted(fn func(*Record) bool) []*Record {
	var out []*Record
	for _, ip := range slices.SortedFunc(maps.Keys(m.records), netip.Addr.Compare) {
		r := m.records[ip]
		if fn(&r) {
			out = append(out, &r)
		}
	}
	return out
}

func (m *memStore) ByOwner(containerID, ifname string) ([]*Record, error) {
	return m.sorted(func(r *Record) bool { return r.ContainerID == containerID && r.IfName == ifname }), nil
}
func (m *memStore) ByPodUID(uid string) ([]*Record, error) {
	if uid == "" {
		return nil, nil
	}
	return m.sorted(func(r *Record) bool { return r.PodUID == uid }), nil
}
func (m *memStore) HeldBy(containerID, ifname string) ([]*Record, error) {
	return m.ByOwner(containerID, ifname)
}
func (m *memStore) ForEach(fn func(*Record) error) error {
	for _, r := range m.sorted(func(*Record) bool { return true }) {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
func (m *memStore) HostLocalRecords() ([]*Record, error) {
	return m.sorted(func(r *Record) bool { return r.Source == SourceHostLocal }), nil
}

var errWrite = errors.New("write failed (injected)")

func (m *memStore) Put(r *Record) error {
	if m.failPutAfter > 0 && m.puts >= m.failPutAfter {
		return errWrite
	}
	if _, bad := m.damaged[r.IP]; bad {
		return fmt.Errorf("%w: %s has a damaged record", ErrAddressHeld, r.IP)
	}
	if prev, ok := m.records[r.IP]; ok && (prev.ContainerID != r.ContainerID || prev.IfName != r.IfName) {
		return fmt.Errorf("%w: %s is held by container %s", ErrAddressHeld, r.IP, prev.ContainerID)
	}
	m.puts++
	m.records[r.IP] = *r
	return nil
}
func (m *memStore) DeleteRecord(r *Record) error { delete(m.records, r.IP); return nil }
func (m *memStore) DeleteDamaged(ip netip.Addr) error {
	delete(m.damaged, ip)
	return nil
}
func (m *memStore) Audit(ev AuditEvent) error { m.audit = append(m.audit, ev); return nil }
func (m *memStore) RepairIndexes(why string, now time.Time) (IndexRepair, error) {
	m.repairs++
	n := len(m.records) + len(m.damaged)
	return IndexRepair{Why: why, Records: n, CountWas: n}, nil
}

func (m *memStore) count() int { return len(m.records) + len(m.damaged) }

// auditLog is the last limit audit events, oldest first (Tx.AuditLog).
func (m *memStore) auditLog(limit int) ([]AuditEvent, error) {
	return m.audit[max(len(m.audit)-limit, 0):], nil
}

// newStore is a fresh in-memory store.
func newStore(t *testing.T) *memStore {
	t.Helper()
	return newMemStore()
}

func update(t *testing.T, s *memStore, fn func(tx Store) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s *memStore, fn func(tx Store) error) {
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
