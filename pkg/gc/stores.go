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

// ReadSnapshot opens the store briefly, reads everything the daemon needs in one
// read transaction, and closes it again: plugins never wait on the daemon for
// longer than that.
func ReadSnapshot(path string) (*Snapshot, error) { return readSnapshot(path, nil) }

// readSnapshot is ReadSnapshot reusing the records cache decoded on earlier
// sweeps (nil: decode everything).
func readSnapshot(path string, cache *allocator.RecordCache) (*Snapshot, error) {
	s, err := allocator.Open(path, allocator.OpenOptions{LockTimeout: storeLockTimeout, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	snap := &Snapshot{}
	err = s.View(func(tx *allocator.Tx) error {
		collect := func(r *allocator.Record) error {
			snap.Records = append(snap.Records, r)
			return nil
		}
		var err error
		if cache != nil {
			err = tx.ForEachCached(cache, collect)
		} else {
			err = tx.ForEach(collect)
		}
		if err != nil {
			return err
		}
		if snap.RangeSets, err = tx.RangeSets(); err != nil {
			return err
		}
		snap.Usage = allocator.Usage(tx, snap.RangeSets)
		snap.Exhaustions, err = tx.Exhaustions()
		return err
	})
	return snap, err
}
