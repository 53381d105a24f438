package gc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
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
	Records     []*allocator.Record
	RangeSets   []allocator.StoredRangeSet
	Usage       []allocator.PoolUsage
	Exhaustions map[int]allocator.Exhaustion
	// seen[i] is Records[i] with the bytes it was decoded from, so that a
	// write can tell without decoding that the record is unchanged since.
	seen []allocator.Seen
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

// Held is how many records the store holds, the base of the mass-reclaim
// guard.
func (s *Snapshot) Held() int { return len(s.Records) }

// ReadSnapshot opens the store briefly, reads everything the daemon needs in one
// read transaction, and closes it again: plugins never wait on the daemon for
// longer than that.
func ReadSnapshot(path string) (*Snapshot, error) { return readSnapshot(path, nil) }

// readSnapshot is ReadSnapshot reusing the records cache decoded on earlier
// sweeps (nil: decode everything). Records are decoded only once the store is
// closed: a plugin waiting for the store's lock waits for a walk over the
// records and a copy of those that changed, never for decoding.
func readSnapshot(path string, cache *allocator.RecordCache) (*Snapshot, error) {
	if cache == nil {
		cache = &allocator.RecordCache{}
	}
	snap, scan, err := scanStore(path, cache)
	if err != nil {
		return snap, err
	}
	seen, err := scan.Decode()
	if err != nil {
		return snap, err
	}
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
func scanStore(path string, cache *allocator.RecordCache) (*Snapshot, *allocator.RecordScan, error) {
	s, err := allocator.Open(path, allocator.OpenOptions{LockTimeout: storeLockTimeout, ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	snap := &Snapshot{}
	var scan *allocator.RecordScan
	err = s.View(func(tx *allocator.Tx) error {
		scan = tx.ScanRecords(cache)
		var err error
		if snap.RangeSets, err = tx.RangeSets(); err != nil {
			return err
		}
		snap.Usage = allocator.Usage(tx, snap.RangeSets)
		snap.Exhaustions, err = tx.Exhaustions()
		return err
	})
	if err != nil {
		return snap, nil, err
	}
	return snap, scan, nil
}
