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
	mark         HostLocalMark
	records      map[netip.Addr]Record
	damaged      map[netip.Addr]DamagedRecord
	audit        []AuditEvent
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

func (m *memStore) Configure(network string, sets []StoredRangeSet) error {
	m.network, m.sets = network, slices.Clone(sets)
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
func (m *memStore) HostLocalMark() HostLocalMark { return m.mark }
func (m *memStore) SetHostLocalMark(mark HostLocalMark, now time.Time) error {
	m.mark.Imported = m.mark.Imported || mark.Imported
	if mark.Exported {
		m.mark.Exported, m.mark.Export = true, mark.Export
	}
	return nil
}

// Free and NextFree read the records: the fake has no bitmap to verify.
func (m *memStore) Free(ip netip.Addr, now time.Time) (bool, error) {
	_, ok := m.records[ip]
	_, bad := m.damaged[ip]
	return !ok && !bad, nil
}
func (m *memStore) NextFree(set StoredRangeSet, last netip.Addr, hasLast bool, now time.Time) (netip.Addr, int, bool, error) {
	all := slices.Collect(maps.Keys(m.records))
	all = append(all, slices.Collect(maps.Keys(m.damaged))...)
	slices.SortFunc(all, netip.Addr.Compare)
	ip, ri, ok := NextFree(set, last, hasLast, newSliceIter(all))
	return ip, ri, ok, nil
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

// Records returns copies of the records q selects, in address order.
func (m *memStore) Records(q Query) ([]*Record, error) {
	var out []*Record
	for _, ip := range slices.SortedFunc(maps.Keys(m.records), netip.Addr.Compare) {
		r := m.records[ip]
		if q.Matches(&r) {
			out = append(out, &r)
		}
	}
	return out, nil
}

var errWrite = errors.New("write failed (injected)")

func (m *memStore) Put(r *Record) error {
	if m.failPutAfter > 0 && m.puts >= m.failPutAfter {
		return errWrite
	}
	if _, bad := m.damaged[r.IP]; bad {
		return fmt.Errorf("%w: %s has a damaged record", ErrAddressReserved, r.IP)
	}
	if prev, ok := m.records[r.IP]; ok && (prev.ContainerID != r.ContainerID || prev.IfName != r.IfName) {
		return fmt.Errorf("%w: %s is held by container %s", ErrAddressReserved, r.IP, prev.ContainerID)
	}
	m.puts++
	m.records[r.IP] = *r
	return nil
}
func (m *memStore) Release(r *Record, ev AuditEvent) error {
	delete(m.records, r.IP)
	return m.Audit(ev)
}
func (m *memStore) ReleaseDamaged(ip netip.Addr, ev AuditEvent) error {
	delete(m.damaged, ip)
	return m.Audit(ev)
}
func (m *memStore) Audit(ev AuditEvent) error { m.audit = append(m.audit, ev); return nil }

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

// hasRecord reports whether ip has a record, healthy or damaged.
func (m *memStore) hasRecord(ip netip.Addr) bool { return !must(m.Free(ip, time.Time{})) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// forEach calls fn for every record of tx, in address order.
func forEach(tx Store, fn func(*Record) error) error {
	recs, err := tx.Records(Query{})
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
