package main

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/pool"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// storeView is what the CLI reads of one store, in one read transaction.
type storeView struct {
	Network string // the store's own name (its meta), else the file's
	Path    string
	Records []*allocator.Record
	// Damaged are the records whose value does not decode: their addresses
	// stay reserved until released by IP or rebuilt.
	Damaged     []allocator.DamagedRecord
	RangeSets   []allocator.StoredRangeSet
	RangesErr   error // the stored range sets do not decode (sizes unknown)
	Usage       []pool.Usage
	Exhaustions map[int]allocator.Exhaustion
}

// readStore opens f read-only (waiting up to lockTimeout for its lock), reads
// it in one transaction and closes it.
func readStore(f daemon.StoreFile, lockTimeout time.Duration) (*storeView, error) {
	st, err := store.Open(f.Path, store.OpenOptions{ReadOnly: true, LockTimeout: lockTimeout})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if err := st.RootDamage(); err != nil {
		return nil, err
	}
	v := &storeView{Network: f.Network, Path: f.Path}
	err = st.View(func(tx *store.Tx) error {
		if name := tx.Network(); name != "" {
			v.Network = name
		}
		if err := tx.ForEach(func(r *allocator.Record) error {
			v.Records = append(v.Records, r)
			return nil
		}); err != nil {
			return err
		}
		v.Damaged = tx.DamagedRecords()
		var err error
		v.RangeSets, err = tx.RangeSets()
		if errors.Is(err, allocator.ErrDamagedValue) {
			v.RangesErr, v.RangeSets, err = err, nil, nil
		}
		if err != nil {
			return err
		}
		v.Usage = pool.Measure(tx, v.RangeSets)
		v.Exhaustions, err = tx.Exhaustions()
		return err
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// rangeSetOf is the index of the range set holding ip, -1 when none does.
func (v *storeView) rangeSetOf(ip netip.Addr) int {
	for i, set := range v.RangeSets {
		for _, r := range set.Ranges {
			if r.Contains(ip) {
				return i
			}
		}
	}
	return -1
}

// damagedIP prints a damaged record's address ("?" when its key is damaged
// too).
func damagedIP(d allocator.DamagedRecord) string {
	if !d.IP.IsValid() {
		return "?"
	}
	return d.IP.String()
}

// damagedErr is a damaged record's decode error as text.
func damagedErr(d allocator.DamagedRecord) string {
	if d.Err == nil {
		return "does not decode"
	}
	return d.Err.Error()
}

// damagedSummary is the error a command returns when it finished but found
// damaged records (exit code 3).
func damagedSummary(n int) error {
	return fmt.Errorf("%w: %d record(s) do not decode (their addresses stay reserved); free one with `release IP` or repair the store with `rebuild --network N`", errDamaged, n)
}

// storeErr is a store's read error as shown to an operator: damage says how
// to repair it; anything else (permissions, I/O) is the environment's to fix.
func storeErr(network string, err error) string {
	switch {
	case errors.Is(err, store.ErrPageDamaged):
		return fmt.Sprintf("%v (repair: hostlease-gc rebuild --network %s --force)", err, network)
	case store.IsDamage(err):
		return fmt.Sprintf("%v (repair: hostlease-gc rebuild --network %s)", err, network)
	}
	return err.Error()
}

// storeWritable reports why the plugin (running as this user) could not
// write the store at path, or nil: the file must be writable (bbolt writes
// it in place) and so must its directory (the lock-held replace, the
// set-aside and a rebuild create files there). A read-only mount, an
// immutable file or one without write permission for this user fails here.
func storeWritable(path string) error {
	if err := unix.Access(path, unix.W_OK); err != nil {
		return fmt.Errorf("store file %s is not writable: %w", path, err)
	}
	if dir := filepath.Dir(path); unix.Access(dir, unix.W_OK) != nil {
		return fmt.Errorf("data dir %s is not writable: %w", dir, unix.Access(dir, unix.W_OK))
	}
	return nil
}
