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
	// SetNetwork records the store's network name once; SetRangeSets the
	// range sets as configured (a no-op write is skipped); RangeSets returns
	// them (an error wrapping ErrDamagedValue when they do not decode).
	SetNetwork(name string) error
	SetRangeSets(sets []StoredRangeSet) error
	RangeSets() ([]StoredRangeSet, error)
	// LastReserved is range set idx's round-robin point (host-local's
	// last_reserved_ip.N); SetLastReserved moves it.
	LastReserved(idx int) (netip.Addr, bool)
	SetLastReserved(idx int, ip netip.Addr) error
	// RecordExhaustion counts one ADD that found range set idx full.
	RecordExhaustion(idx int, desc string, now time.Time) error
	// Migrated reports whether host-local state was imported (MarkMigrated
	// records it, or that it must never be).
	Migrated() bool
	MarkMigrated(now time.Time) error
	// HostLocalExport is the store's mark of its last export to
	// host-local's files (false when it was never exported);
	// SetHostLocalExport writes it.
	HostLocalExport() (HostLocalExport, bool)
	SetHostLocalExport(m HostLocalExport) error

	// Taken reports whether ip is reserved, from a derived index (cheap);
	// HasRecord whether ip has a record, healthy or damaged (the truth).
	// Reserved walks the reserved addresses in address order.
	Taken(ip netip.Addr) bool
	HasRecord(ip netip.Addr) bool
	Reserved() TakenIter

	// Lookup returns the record holding ip, or the damaged record there, or
	// neither. ByOwner returns (containerID, ifname)'s records as the owner
	// index lists them (fast, trusts the index); HeldBy the same verified
	// against the records when the index has none. ForEach visits every
	// record that decodes, in address order (damaged ones are skipped and
	// noted). HostLocalRecords returns the records imported from host-local
	// that are still held.
	Lookup(ip netip.Addr) (*Record, *DamagedRecord)
	ByOwner(containerID, ifname string) ([]*Record, error)
	// ByPodUID returns the records of a pod UID as the pod index lists them
	// (each read and its UID compared; an entry the index lacks is not
	// found).
	ByPodUID(uid string) ([]*Record, error)
	HeldBy(containerID, ifname string) ([]*Record, error)
	ForEach(fn func(*Record) error) error
	HostLocalRecords() ([]*Record, error)

	// Put writes r under r.IP; an address held by another attachment or by
	// a damaged record is refused with an error wrapping ErrAddressHeld.
	// DeleteRecord removes r, read in this transaction; DeleteDamaged the
	// undecodable record under ip. Neither audits (ReleaseRecord and
	// ReleaseIP do).
	Put(r *Record) error
	DeleteRecord(r *Record) error
	DeleteDamaged(ip netip.Addr) error

	// Audit appends ev to the store's bounded audit log. RepairIndexes
	// rebuilds the derived indexes from the records (audited) and reports
	// what it changed.
	Audit(ev AuditEvent) error
	RepairIndexes(why string, now time.Time) (IndexRepair, error)
}
