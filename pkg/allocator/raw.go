package allocator

import "bytes"

// RecordCache keeps decoded records by their stored bytes, so that a reader
// that scans a store again and again (the daemon, every sweep) decodes only the
// records that changed. Cached records are shared: callers must not modify them.
type RecordCache struct {
	entries map[string]cachedRecord // by address key
	seen    map[string]bool
}

type cachedRecord struct {
	raw []byte
	rec *Record
}

// ForEachCached calls fn for every record in address order, decoding only those
// whose bytes differ from what cache saw last time. Records gone from the store
// are dropped from the cache. fn must not write, nor modify the record.
func (tx *Tx) ForEachCached(cache *RecordCache, fn func(*Record) error) error {
	if cache.entries == nil {
		cache.entries = map[string]cachedRecord{}
	}
	cache.seen = make(map[string]bool, len(cache.entries))
	err := tx.allocs.ForEach(func(k, v []byte) error {
		key := string(k)
		cache.seen[key] = true
		if c, ok := cache.entries[key]; ok && bytes.Equal(c.raw, v) {
			return fn(c.rec)
		}
		r, err := decodeRecord(v)
		if err != nil {
			ip, _ := keyAddr(k)
			return &recordError{ip: ip.String(), err: err}
		}
		// v lives in bbolt's mmap only for the transaction: keep a copy.
		cache.entries[key] = cachedRecord{raw: bytes.Clone(v), rec: r}
		return fn(r)
	})
	if err != nil {
		return err
	}
	for key := range cache.entries {
		if !cache.seen[key] {
			delete(cache.entries, key)
		}
	}
	return nil
}

type recordError struct {
	ip  string
	err error
}

func (e *recordError) Error() string { return "record " + e.ip + ": " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }
