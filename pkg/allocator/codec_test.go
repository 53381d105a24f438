package allocator

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// sameRecord compares records field by field, times by instant.
func sameRecord(t *testing.T, name string, got, want *Record) {
	t.Helper()
	g, w := *got, *want
	for _, p := range [][2]*time.Time{{&g.Created, &w.Created}, {&g.Committed, &w.Committed}, {&g.Obs.FirstMissed, &w.Obs.FirstMissed}} {
		if !p[0].Equal(*p[1]) {
			t.Errorf("%s: time %v, want %v", name, *p[0], *p[1])
		}
		*p[0], *p[1] = time.Time{}, time.Time{}
	}
	g.Version, w.Version = 0, 0
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %+v\nwant %+v", name, g, w)
	}
}

func codecRecords() map[string]*Record {
	now := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	return map[string]*Record{
		"minimal": {IP: netip.MustParseAddr("10.0.0.2"), ContainerID: "c", IfName: "eth0", State: StatePending},
		"full v4": {
			IP: netip.MustParseAddr("10.1.255.254"), PrefixLen: 16, Gateway: netip.MustParseAddr("10.1.0.1"), RangeSet: 3,
			ContainerID: strings.Repeat("ab", 32), IfName: "net1", Network: "k8s-pod-network",
			PodNamespace: "kube-system", PodName: "coredns-5d78c9869d-x7x2k", PodUID: "0f9e4f8e-6a0b-4b9e-9c1e-3e3e3e3e3e3e",
			Netns: "/var/run/netns/cni-1234", State: StateCommitted, Source: "add", Created: now, Committed: now.Add(time.Second),
			Obs: Observation{Misses: 2, FirstMissed: now.Add(time.Minute), Verdict: "absent 2/3", SandboxState: "absent"},
		},
		"v6, imported outside every range": {
			IP: netip.MustParseAddr("fd00::ffff:1"), PrefixLen: 64, RangeSet: -1, ContainerID: "legacy",
			State: StateCommitted, Source: "host-local", Created: time.Unix(0, 0),
		},
		"unicode and empty strings": {IP: netip.MustParseAddr("192.168.0.9"), PodName: "pöd-ü", Obs: Observation{Verdict: "veto: pod \"a\"\n"}},
	}
}

func TestRecordCodecRoundTrip(t *testing.T) {
	for name, r := range codecRecords() {
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != binaryFormat {
			t.Errorf("%s: encoded as %q..., want the binary format", name, b[:1])
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameRecord(t, name, got, r)
	}
}

func TestRecordCodecRefusesDamage(t *testing.T) {
	b, _ := encodeRecord(codecRecords()["full v4"])
	for n := 0; n < len(b); n++ {
		if r, err := decodeRecord(b[:n]); err == nil {
			t.Fatalf("decoded a record cut to %d of %d bytes: %+v", n, len(b), r)
		}
	}
	if _, err := decodeRecord(append(b, 0)); err == nil || !strings.Contains(err.Error(), "unexpected bytes") {
		t.Errorf("trailing byte: err %v, want unexpected bytes", err)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		junk := make([]byte, rng.Intn(64))
		rng.Read(junk)
		if len(junk) > 0 && rng.Intn(2) == 0 {
			junk[0] = binaryFormat
		}
		_, _ = decodeRecord(junk)
		_, _ = readAudit(junk)
		_, _ = readRangeSets(junk)
	}
}

func TestAuditCodec(t *testing.T) {
	ev := AuditEvent{Time: time.Unix(1700000000, 5).UTC(), Action: "reclaim", Reason: "absent: 3 sweeps", IP: netip.MustParseAddr("fd00::7"),
		ContainerID: "c1", IfName: "eth0", Pod: "ns/p", By: "hostlease-gc"}
	got, err := readAudit(appendAudit(&ev))
	if err != nil || !reflect.DeepEqual(got, ev) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, ev)
	}
	got, err = readAudit(appendAudit(&AuditEvent{}))
	if err != nil || !reflect.DeepEqual(got, AuditEvent{}) {
		t.Errorf("zero event: %+v, %v", got, err)
	}
}

func TestRangeSetsCodec(t *testing.T) {
	sets := []StoredRangeSet{
		{Ranges: []StoredRange{
			{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: netip.MustParseAddr("10.0.0.10"), End: netip.MustParseAddr("10.0.0.20"), Gateway: netip.MustParseAddr("10.0.0.1")},
			{Subnet: netip.MustParsePrefix("10.0.1.0/24"), Start: netip.MustParseAddr("10.0.1.1"), End: netip.MustParseAddr("10.0.1.254")},
		}},
		{Ranges: []StoredRange{{Subnet: netip.MustParsePrefix("fd00::/64"), Start: netip.MustParseAddr("fd00::1"), End: netip.MustParseAddr("fd00::ffff:ffff:ffff:ffff"), Gateway: netip.MustParseAddr("fd00::1")}}},
	}
	got, err := readRangeSets(appendRangeSets(sets))
	if err != nil || !reflect.DeepEqual(got, sets) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, sets)
	}
}

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
		damage bool   // ErrStoreUnreadable, not *SchemaError
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
				case tc.damage && (!errors.Is(err, ErrStoreUnreadable) || errors.As(err, &se)):
					t.Fatalf("err = %v, want ErrStoreUnreadable", err)
				case tc.damage:
				case !errors.As(err, &se) || !errors.Is(err, ErrStoreSchema):
					t.Fatalf("err = %v, want a *SchemaError (ErrStoreSchema)", err)
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
