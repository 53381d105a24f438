package store

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the version of the store layout (buckets and binary
// values, codec.go) this code reads and writes. A store of any other schema is
// refused (ErrSchema): older ones (1: JSON values) never left this
// repository, and a newer one would be misread.
const SchemaVersion = 2

// init is a read-write open's check: the length (length.go), the schema
// (checkSchema), and whether every bucket and the records count are there;
// initialise creates what is missing.
func (s *Store) init() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err, s.path)
	defer func() { err = classifyTxError(s.path, err) }()
	// Every plugin call opens the store read-write, and the store is
	// initialised on all but the first: then a read-only look is enough, and
	// spares each call a write transaction (a commit: two fdatasyncs;
	// docs/benchmarks.md).
	ready := false
	if err := s.db.View(func(btx *bolt.Tx) error {
		if err := checkLength(btx, s.file, s.path); err != nil {
			return err
		}
		faults := rootFaults(btx, s.file)
		if err := rootError(s.path, faults, false); err != nil {
			return err
		}
		if err := checkSchema(btx, s.path); err != nil || btx.Bucket(bucketAllocs) == nil {
			return err // refused, or a new file: initialise it
		}
		if len(faults) > 0 {
			return nil // plain values where derived buckets belong: initialise repairs them
		}
		for _, b := range derivedBuckets {
			if btx.Bucket(b) == nil {
				return nil
			}
		}
		ready = len(btx.Bucket(bucketMeta).Get(keyRecords)) == 8
		return nil
	}); err != nil || ready {
		return err
	}
	return s.initialise()
}

// derivedBuckets are the buckets a store of this schema has besides meta and
// allocs. The indexes among them are derived from the records: initialise
// rebuilds one that is missing (damage) instead of refusing the store.
//
// A store written before the pod index existed lacks its bucket: the first
// read-write open adds it, built from the records (no schema change: older
// binaries ignore the bucket, and entries they fail to write are found
// missing by the next repair; a missing entry only forgoes a release).
var derivedBuckets = [][]byte{bucketTaken, bucketOwners, bucketExhaustion, bucketAudit, bucketImported, bucketPods}

// checkSchema refuses a store whose meta names another schema than
// SchemaVersion (*SchemaError, ErrSchema: another version's store, not
// damage). A schema value no version ever wrote (none, 0, more than one
// byte), or a meta or allocs bucket gone while the other remains, is damage
// (ErrUnreadable: recreating the records would hand every address in
// use out again). A file with neither bucket is new.
func checkSchema(btx *bolt.Tx, path string) error {
	meta, allocs := btx.Bucket(bucketMeta), btx.Bucket(bucketAllocs)
	switch {
	case meta == nil && allocs == nil:
		return nil
	case meta == nil:
		return fmt.Errorf("%w: %s lacks its meta bucket", ErrUnreadable, path)
	case allocs == nil:
		return fmt.Errorf("%w: %s lacks its allocs bucket", ErrUnreadable, path)
	}
	switch v := meta.Get(keySchema); {
	case len(v) != 1 || v[0] == 0:
		return fmt.Errorf("%w: %s: meta schema value %x is no schema", ErrUnreadable, path, v)
	case int(v[0]) != SchemaVersion:
		return &SchemaError{Path: path, Found: int(v[0])}
	}
	return nil
}

// initialise makes a new file a store of this schema, or restores the
// derived buckets and the records count of a store that lost them (damage:
// the indexes are rebuilt from the records, audited as any index repair). A
// page it then fails to read is page damage, as in any later transaction:
// the daemon's open reads no more than init's first look, so it must not be
// told to rebuild.
func (s *Store) initialise() (err error) {
	defer recoverDamaged(&err, s.path)
	defer func() { err = structureDamage(s.path, err) }()
	return s.db.Update(func(btx *bolt.Tx) error {
		faults := rootFaults(btx, s.file)
		if err := rootError(s.path, faults, false); err != nil {
			return err
		}
		if err := checkSchema(btx, s.path); err != nil {
			return err
		}
		repaired, err := repairRoots(btx, faults)
		if err != nil {
			return err
		}
		fresh := btx.Bucket(bucketAllocs) == nil
		restoreImported := !fresh && btx.Bucket(bucketImported) == nil
		for _, b := range append([][]byte{bucketMeta, bucketAllocs}, derivedBuckets...) {
			if btx.Bucket(b) == nil {
				if _, err := btx.CreateBucket(b); err != nil {
					return err
				}
			}
		}
		tx := wrapTx(btx, s.by)
		if fresh {
			if err := tx.setRecordCount(0); err != nil {
				return err
			}
			return tx.meta.Put(keySchema, []byte{SchemaVersion})
		}
		if restoreImported {
			// The host-local records are those whose source says so.
			if err := tx.allocs.ForEach(func(k, v []byte) error {
				if r, err := decodeAt(k, v); err == nil && r.Source == allocator.SourceHostLocal {
					return tx.imported.Put(k, nil)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		// The taken bitmap, the owner and pod indexes and the records count.
		if _, err := tx.RepairIndexes("open: a derived index or the records count was missing", time.Now()); err != nil {
			return err
		}
		return tx.auditRootRepair(repaired, time.Now())
	})
}

// checkReadable is a read-only open's look: the length and the schema. A
// read-only view of a store that lost a derived index reads the records
// instead (see wrapTx); the next read-write open restores the index.
func (s *Store) checkReadable() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err, s.path)
	return s.db.View(func(btx *bolt.Tx) error {
		// First the length: the bucket lookups below read pages that a
		// truncated file no longer has.
		if err := checkLength(btx, s.file, s.path); err != nil {
			return err
		}
		// The root page's entries: damage no open repairs is refused; a
		// derived bucket turned plain value reads as a missing one (see
		// wrapTx) until the next read-write open makes it anew. Readers
		// that report a store's health ask RootDamage. The rebuild's own
		// view (lockedFileView) reads on and asks RootDamage too.
		if !s.lockedFileView {
			if err := rootError(s.path, rootFaults(btx, s.file), false); err != nil {
				return err
			}
		}
		if btx.Bucket(bucketMeta) == nil || btx.Bucket(bucketAllocs) == nil {
			return fmt.Errorf("%w: %s lacks its buckets", ErrUnreadable, s.path)
		}
		return checkSchema(btx, s.path)
	})
}
