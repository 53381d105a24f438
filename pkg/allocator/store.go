package allocator

import (
	"net/netip"
	"time"
)

// Store is what allocation needs of one transaction on a store, and nothing
// more (host-local's backend.Store pattern). store.Tx implements it over the
// bbolt file; the tests use an in-memory fake. Every method reads or writes
// within the one transaction the caller runs; a write keeps the store's
// derived indexes in step with its records (the store's job, not the
// caller's).
type Store interface {
	// Configure records the store's network name once and the range sets
	// as configured (a no-op write is skipped); RangeSets returns them (an
	// error wrapping ErrDamagedValue when they do not decode).
	Configure(network string, sets []StoredRangeSet) error
	RangeSets() ([]StoredRangeSet, error)
	// LastReserved is range set idx's round-robin point (host-local's
	// last_reserved_ip.N); SetLastReserved moves it.
	LastReserved(idx int) (netip.Addr, bool)
	SetLastReserved(idx int, ip netip.Addr) error
	// RecordExhaustion counts one ADD that found range set idx full.
	RecordExhaustion(idx int, desc string, now time.Time) error
	// HostLocalMark is what the store records of host-local's state;
	// SetHostLocalMark records m (a mark is only ever added: Imported and
	// Exported are never cleared; the import is stamped now).
	HostLocalMark() HostLocalMark
	SetHostLocalMark(m HostLocalMark, now time.Time) error

	// Free reports whether ip is free: it has no record and no taken bit.
	// NextFree is NextFree (choose.go) over the store's taken addresses,
	// verified: the address it returns has no record. Both read the taken
	// bitmap, a derived index, and check it against the records; a record
	// the bitmap lost is found there, and in a write transaction the
	// indexes are rebuilt from the records (audited, AuditIndexRepair at
	// now) before the answer is given again. A read-only transaction
	// answers from the bitmap as it is.
	Free(ip netip.Addr, now time.Time) (bool, error)
	NextFree(set StoredRangeSet, last netip.Addr, hasLast bool, now time.Time) (ip netip.Addr, rangeIdx int, ok bool, err error)

	// Lookup returns the record holding ip, or the damaged record there, or
	// neither. Records returns the records q selects, in address order
	// (damaged ones are skipped and noted).
	Lookup(ip netip.Addr) (*Record, *DamagedRecord)
	Records(q Query) ([]*Record, error)

	// Put writes r under r.IP; an address held by another attachment or by
	// a damaged record is refused with an error wrapping ErrAddressReserved.
	Put(r *Record) error
	// Release deletes r, a record read in this transaction, with its index
	// entries, and appends ev to the audit log; ReleaseDamaged the same for
	// the undecodable record under ip. They are the only deletes of a
	// record: every release is audited.
	Release(r *Record, ev AuditEvent) error
	ReleaseDamaged(ip netip.Addr, ev AuditEvent) error
	// Audit appends ev to the store's bounded audit log.
	Audit(ev AuditEvent) error
}

// HostLocalMark is what a store records of host-local: whether its state
// was imported (or must never be: a store rebuilt from the runtime), and
// whether and when the store was exported to host-local's files.
type HostLocalMark struct {
	Imported bool
	Exported bool
	Export   HostLocalExport
}

// Query selects records (Store.Records). The zero Query selects every
// record; each field set narrows the selection, and the store reads the
// one index that answers it (the owner index for Attachment, the pod index
// for PodUID, the imported index for Imported), checking each record it
// lists against the query (an index may list an entry in excess).
type Query struct {
	// Attachment: exactly this attachment's records (an empty IfName is
	// the container-ID-only records of old host-local versions).
	Attachment *Attachment
	// Verify: an empty answer for Attachment is believed only when the
	// store's indexes agree with its records count; otherwise the records
	// are read (and the indexes repaired in a write transaction, audited).
	// DEL, CHECK and the commit marker verify; ADD's hot path does not.
	Verify bool
	// PodUID: the records of this pod UID.
	PodUID string
	// Imported: the records imported from host-local (Source
	// SourceHostLocal) that are still held.
	Imported bool
}

// Matches reports whether r is one of the records q selects.
func (q Query) Matches(r *Record) bool {
	return (q.Attachment == nil || *q.Attachment == r.Attachment()) &&
		(q.PodUID == "" || r.PodUID == q.PodUID) &&
		(!q.Imported || r.Source == SourceHostLocal)
}
