package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/pool"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// storeLockTimeout is how long the daemon waits for a store a plugin holds. It
// is short: a busy store is simply looked at again next sweep.
const storeLockTimeout = 2 * time.Second

// StoreFile is one network's store found under the data dir.
type StoreFile struct {
	Network string
	Path    string
}

// FindStores lists the stores under dir (files named <network>.db).
func FindStores(dir string) ([]StoreFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []StoreFile
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".db")
		if !ok || e.IsDir() || name == "" {
			continue
		}
		out = append(out, StoreFile{Network: name, Path: filepath.Join(dir, e.Name())})
	}
	return out, nil
}

// Snapshot is what one read transaction saw of a store.
type Snapshot struct {
	// Network is the name the store records (a long name's file name is
	// shortened, so it is not derived from the file).
	Network string
	Records []*allocator.Record
	// Damaged are the records that do not decode: quarantined, their
	// addresses stay reserved, and they count as held.
	Damaged []allocator.DamagedRecord
	// Indexes is what a verification of the derived indexes found (zero
	// when not verified this sweep).
	Indexes allocator.IndexRepair
	// RangeSetsErr is set when the stored range sets do not decode (the next
	// ADD rewrites them): the sweep carries on without pool sizes.
	RangeSetsErr error
	RangeSets    []allocator.StoredRangeSet
	Usage        []pool.Usage
	Exhaustions  map[int]allocator.Exhaustion
	// PluginReleases are the plugin's releases of dead sandboxes
	// (allocator.IsPluginRelease) in the audit log after the sequence the
	// read started from; AuditLast is the log's last sequence.
	PluginReleases []allocator.AuditEvent
	AuditLast      uint64
	// seen[i] is Records[i] with the bytes it was decoded from, so that a
	// write can tell without decoding that the record is unchanged since.
	seen []store.Seen
}

// PoolSize is the number of allocatable addresses over all range sets (at least
// the number of records, for a store whose ranges were never recorded).
func (s *Snapshot) PoolSize() float64 {
	total := 0.0
	for _, u := range s.Usage {
		f, _ := u.Size.Float64()
		total += f
	}
	return max(total, float64(len(s.Records)))
}

// Reserved is how many addresses the store reserves (its records, damaged
// ones included), the base of the mass-reclaim guard.
func (s *Snapshot) Reserved() int { return len(s.Records) + len(s.Damaged) }

// ReadSnapshot opens the store briefly, reads everything the daemon needs in one
// read transaction, and closes it again: plugins never wait on the daemon for
// longer than that.
func ReadSnapshot(path string) (*Snapshot, error) { return readSnapshot(path, nil, false, 0) }

// readSnapshot is ReadSnapshot reusing the records cache decoded on earlier
// sweeps (nil: decode everything). Records are decoded only once the store is
// closed: a plugin waiting for the store's lock waits for a walk over the
// records and a copy of those that changed, never for decoding. The audit
// log is read after auditAfter or the sequence the store records as
// reported, whichever is later.
func readSnapshot(path string, cache *store.RecordCache, verify bool, auditAfter uint64) (*Snapshot, error) {
	if cache == nil {
		cache = &store.RecordCache{}
	}
	snap, scan, err := scanStore(path, cache, verify, auditAfter)
	if err != nil {
		return snap, err
	}
	seen, err := scan.Decode()
	if err != nil {
		return snap, err
	}
	snap.Damaged = scan.Damaged()
	snap.seen = seen
	if len(seen) > 0 {
		snap.Records = make([]*allocator.Record, len(seen))
		for i, sr := range seen {
			snap.Records[i] = sr.Rec
		}
	}
	return snap, nil
}

// scanStore is the part of a snapshot taken under the store's shared lock:
// one read transaction that copies out the records changed since cache's
// last scan (undecoded), the range sets, the pool usage and the exhaustion
// counters. The store is closed when it returns. On an error in the
// transaction the snapshot holds what was read before it (the range sets let
// a rebuild keep only the network's addresses).
func scanStore(path string, cache *store.RecordCache, verify bool, auditAfter uint64) (*Snapshot, *store.RecordScan, error) {
	s, err := store.Open(path, store.OpenOptions{LockTimeout: storeLockTimeout, ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	if err := s.RootDamage(); err != nil {
		return nil, nil, err // a damaged root entry: set aside and rebuilt (ErrUnreadable)
	}
	snap := &Snapshot{}
	var scan *store.RecordScan
	err = s.View(func(tx *store.Tx) error {
		snap.Network = tx.Network()
		if verify {
			// The derived indexes against the records (decodes every
			// record under the shared lock: done every verifyEvery sweeps).
			snap.Indexes = tx.VerifyIndexes()
		}
		scan = tx.ScanRecords(cache)
		var err error
		if snap.RangeSets, err = tx.RangeSets(); err != nil {
			if !errors.Is(err, allocator.ErrDamagedValue) {
				return err
			}
			snap.RangeSets, snap.RangeSetsErr = nil, err
		}
		snap.Usage = pool.Measure(tx, snap.RangeSets)
		evs, last := tx.AuditSince(max(auditAfter, tx.AuditReported()))
		for _, ev := range evs {
			if allocator.IsPluginRelease(ev) {
				snap.PluginReleases = append(snap.PluginReleases, ev)
			}
		}
		snap.AuditLast = last
		snap.Exhaustions, err = tx.Exhaustions()
		return err
	})
	if err != nil {
		return snap, nil, err
	}
	return snap, scan, nil
}
