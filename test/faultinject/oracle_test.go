package faultinject

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The oracle reads damaged stores after every call: a bucket whose root page
// lies beyond the mapped file must come back as "cannot read", not as a fault
// that kills the whole suite.
func TestReadViewOfRootBeyondFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), network+".db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(bucketAllocs))
		if err != nil {
			return err
		}
		for i := range 200 { // more than an inline bucket holds: allocs gets its own pages
			if err := b.Put([]byte{10, 0, byte(i >> 8), byte(i)}, make([]byte, 64)); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, e, err := rootEntry(path, bucketAllocs)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAt(path, e.valOff, binary.LittleEndian.AppendUint64(nil, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if v, err := readView(path); err == nil {
		t.Fatalf("readView of a store whose allocs root is beyond the file: got %d keys, want an error", len(v.Keys))
	}
}
