package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A store of another schema (an older binary's JSON values, a newer
// binary's after a downgrade) is refused by every kind of open with a
// *SchemaError naming the schema found and the one expected, never taken for
// damage (which the daemon would set aside and rebuild, dropping records); a
// schema value no version writes is damage. Either way the file is left
// exactly as it was.
func TestOpenRefusesOtherSchemas(t *testing.T) {
	cases := []struct {
		name   string
		value  []byte // the meta schema value (nil: deleted)
		damage bool   // ErrUnreadable, not *SchemaError
		says   string
	}{
		{"schema 1 (JSON values)", []byte{1}, false, "has schema 1"},
		{"newer schema", []byte{SchemaVersion + 1}, false, fmt.Sprintf("has schema %d", SchemaVersion+1)},
		{"schema 0", []byte{0}, true, "meta schema value 00 is no schema"},
		{"no schema", nil, true, "meta schema value  is no schema"},
		{"two-byte value", []byte{2, 2}, true, "meta schema value 0202 is no schema"},
	}
	for _, tc := range cases {
		for _, mode := range []OpenOptions{{Create: true}, {}, {ReadOnly: true}} {
			t.Run(fmt.Sprintf("%s/readonly=%v,create=%v", tc.name, mode.ReadOnly, mode.Create), func(t *testing.T) {
				s := newStore(t)
				update(t, s, func(tx *Tx) error { return tx.Put(rec("10.0.0.2", "c1", "eth0")) })
				if err := s.db.Update(func(btx *bolt.Tx) error {
					if tc.value == nil {
						return btx.Bucket(bucketMeta).Delete(keySchema)
					}
					return btx.Bucket(bucketMeta).Put(keySchema, tc.value)
				}); err != nil {
					t.Fatal(err)
				}
				s.Close()
				before, _ := os.ReadFile(s.Path())
				mode.LockTimeout = time.Second
				s2, err := Open(s.Path(), mode)
				if err == nil {
					s2.Close()
					t.Fatal("Open succeeded on a store of another schema")
				}
				var se *SchemaError
				switch {
				case tc.damage && (!errors.Is(err, ErrUnreadable) || errors.As(err, &se)):
					t.Fatalf("err = %v, want ErrUnreadable", err)
				case tc.damage:
				case !errors.As(err, &se) || !errors.Is(err, ErrSchema):
					t.Fatalf("err = %v, want a *SchemaError (ErrSchema)", err)
				case IsDamage(err) || IsEnvironmentError(err):
					t.Errorf("a store of another schema classed as damage or environment: %v", err)
				default:
					if want := fmt.Sprintf("reads schema %d only", SchemaVersion); !strings.Contains(err.Error(), want) {
						t.Errorf("error %q: want it to name the schema expected (%q)", err, want)
					}
				}
				if msg := err.Error(); !strings.Contains(msg, tc.says) || !strings.Contains(msg, s.Path()) {
					t.Errorf("error %q: want it to name the path and %q", msg, tc.says)
				}
				if after, _ := os.ReadFile(s.Path()); !bytes.Equal(before, after) {
					t.Error("a refused Open modified the store")
				}
			})
		}
	}
}
