package store

// The meta bucket: the network, its range sets and round-robin points, and
// whether host-local state was imported.

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Network is the network name the store was first written for ("" if never).
func (tx *Tx) Network() string { return string(tx.meta.Get(keyNetwork)) }

// SetNetwork records the store's network name once.
func (tx *Tx) SetNetwork(name string) error {
	if string(tx.meta.Get(keyNetwork)) == name {
		return nil
	}
	return tx.meta.Put(keyNetwork, []byte(name))
}

// LastReserved is the address last reserved in range set idx (host-local's
// last_reserved_ip.N), the point round-robin allocation continues from.
func (tx *Tx) LastReserved(idx int) (netip.Addr, bool) {
	ip, ok := keyAddr(tx.meta.Get(lastReservedKey(idx)))
	return ip, ok
}

// SetLastReserved moves range set idx's round-robin point.
func (tx *Tx) SetLastReserved(idx int, ip netip.Addr) error {
	return tx.meta.Put(lastReservedKey(idx), addrKey(ip))
}

// RangeSets returns the range sets recorded by the last ADD. A stored value
// that does not decode is an error wrapping ErrDamagedValue (the next ADD
// rewrites it): callers that can do without the range sets carry on.
func (tx *Tx) RangeSets() ([]allocator.StoredRangeSet, error) {
	v := tx.meta.Get(keyRanges)
	if v == nil {
		return nil, nil
	}
	out, err := readRangeSets(v)
	if err != nil {
		return nil, fmt.Errorf("%w: stored range sets: %v", allocator.ErrDamagedValue, err)
	}
	return out, nil
}

// SetRangeSets records the configured range sets; a no-op write is skipped so
// the common ADD does not rewrite the meta page for nothing.
func (tx *Tx) SetRangeSets(sets []allocator.StoredRangeSet) error {
	v := appendRangeSets(sets)
	if bytes.Equal(tx.meta.Get(keyRanges), v) {
		return nil
	}
	return tx.meta.Put(keyRanges, v)
}

// MarkMigrated records that host-local state must not be imported into this
// store (it was rebuilt from the runtime, which is more recent truth).
func (tx *Tx) MarkMigrated(now time.Time) error {
	return tx.meta.Put(keyImported, []byte(now.UTC().Format(time.RFC3339)))
}

// Migrated reports whether host-local state was imported into this store
// (or must never be: MarkMigrated).
func (tx *Tx) Migrated() bool { return tx.meta.Get(keyImported) != nil }
