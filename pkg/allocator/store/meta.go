package store

// The meta bucket: the network, its range sets and round-robin points, and
// whether host-local state was imported.

import (
	"bytes"
	"encoding/binary"
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

// keyExport is meta's mark of the last export to host-local's files
// (allocator.HostLocalExport), created by the first export: version 1, then
// the export's instant (unix nanoseconds), then the stamp of host-local's
// directory as last merged (device, inode, ctime in nanoseconds), each 8
// bytes big endian. Stores without it were never exported and read as such.
var keyExport = []byte("hostlocal_export")

const exportMarkVersion = 1

// HostLocalExport returns the store's export mark. A mark that does not
// decode is returned as an export with no stamp (the next write merges
// host-local's state and rewrites it): a damaged mark must not stop merges.
func (tx *Tx) HostLocalExport() (allocator.HostLocalExport, bool) {
	v := tx.meta.Get(keyExport)
	if v == nil {
		return allocator.HostLocalExport{}, false
	}
	if len(v) != 1+4*8 || v[0] != exportMarkVersion {
		return allocator.HostLocalExport{}, true
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(v[1+8*i:]) }
	return allocator.HostLocalExport{
		At:   time.Unix(0, int64(u(0))).UTC(),
		Seen: allocator.DirStamp{Dev: u(1), Ino: u(2), Ctime: int64(u(3))},
	}, true
}

// SetHostLocalExport writes the store's export mark.
func (tx *Tx) SetHostLocalExport(m allocator.HostLocalExport) error {
	v := []byte{exportMarkVersion}
	for _, u := range []uint64{uint64(m.At.UnixNano()), m.Seen.Dev, m.Seen.Ino, uint64(m.Seen.Ctime)} {
		v = binary.BigEndian.AppendUint64(v, u)
	}
	return tx.meta.Put(keyExport, v)
}

// Configure records the network's name and its range sets
// (allocator.Store): SetNetwork, then SetRangeSets.
func (tx *Tx) Configure(network string, sets []allocator.StoredRangeSet) error {
	if err := tx.SetNetwork(network); err != nil {
		return err
	}
	return tx.SetRangeSets(sets)
}

// HostLocalMark is the store's record of host-local (allocator.Store):
// Migrated and the export mark.
func (tx *Tx) HostLocalMark() allocator.HostLocalMark {
	m := allocator.HostLocalMark{Imported: tx.Migrated()}
	m.Export, m.Exported = tx.HostLocalExport()
	return m
}

// SetHostLocalMark records m: MarkMigrated(now) when m is Imported and the
// store was not, the export mark when m is Exported and it changed.
func (tx *Tx) SetHostLocalMark(m allocator.HostLocalMark, now time.Time) error {
	cur := tx.HostLocalMark()
	if m.Imported && !cur.Imported {
		if err := tx.MarkMigrated(now); err != nil {
			return err
		}
	}
	if m.Exported && (!cur.Exported || m.Export != cur.Export) {
		return tx.SetHostLocalExport(m.Export)
	}
	return nil
}
