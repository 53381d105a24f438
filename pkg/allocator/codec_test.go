package allocator

import (
	"encoding/json"
	"math/rand"
	"net/netip"
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
		if b[0] != binaryFormat || isJSON(b) {
			t.Errorf("%s: encoded as %q..., want the binary format", name, b[:1])
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameRecord(t, name, got, r)
	}
}

// Stores written by schema 1 hold JSON records; they must read the same.
func TestRecordCodecReadsSchema1JSON(t *testing.T) {
	for name, r := range codecRecords() {
		r.Version = 1
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameRecord(t, name, got, r)
	}
}

// A damaged value is refused, never half-read: every truncation and any
// trailing garbage is an error, and random bytes never panic the decoder.
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

// A store written by schema 1 (JSON values, schema byte 1) keeps working: its
// records, range sets and audit log read back, the first write transaction
// raises the schema to 2, and what is written from then on is binary.
func TestSchema1StoreUpgrades(t *testing.T) {
	s := newStore(t)
	old := codecRecords()["full v4"]
	old.Version = 1
	legacy, _ := json.Marshal(old)
	sets := []StoredRangeSet{{Ranges: []StoredRange{{Subnet: netip.MustParsePrefix("10.1.0.0/16"), Start: netip.MustParseAddr("10.1.0.2"), End: netip.MustParseAddr("10.1.255.254"), Gateway: netip.MustParseAddr("10.1.0.1")}}}}
	legacySets, _ := json.Marshal(sets)
	legacyEv, _ := json.Marshal(AuditEvent{Time: time.Unix(1700000000, 0).UTC(), Action: "release", ContainerID: "gone"})
	if err := s.db.Update(func(btx *bolt.Tx) error {
		// Schema 1 indexed reserved addresses as keys of a "taken" bucket.
		if err := btx.DeleteBucket(bucketTaken); err != nil {
			return err
		}
		if _, err := btx.CreateBucket(bucketTakenKeys); err != nil {
			return err
		}
		// ... and its owners by containerID \0 ifname \0 addrKey.
		if err := btx.DeleteBucket(bucketOwners); err != nil {
			return err
		}
		if _, err := btx.CreateBucket(bucketOwnerNames); err != nil {
			return err
		}
		key := addrKey(old.IP)
		ownerKey := append([]byte(old.ContainerID+"\x00"+old.IfName+"\x00"), key...)
		for _, kv := range [][3][]byte{
			{bucketAllocs, key, legacy}, {bucketTakenKeys, key, {1}},
			{bucketOwnerNames, ownerKey, nil},
			{bucketMeta, keyRanges, legacySets}, {bucketMeta, keySchema, {1}},
			{bucketAudit, []byte{0, 0, 0, 0, 0, 0, 0, 1}, legacyEv},
		} {
			if err := btx.Bucket(kv[0]).Put(kv[1], kv[2]); err != nil {
				return err
			}
		}
		return btx.Bucket(bucketAudit).SetSequence(1)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Readers (the daemon, the CLI) open it read-only before any plugin call
	// has upgraded it: everything reads, from the records' keys.
	ro, err := Open(s.Path(), OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a schema 1 store: %v", err)
	}
	view(t, ro, func(tx *Tx) error {
		if !tx.Taken(old.IP) || tx.Count() != 1 {
			t.Errorf("schema 1, read-only: Taken %v Count %d, want true 1", tx.Taken(old.IP), tx.Count())
		}
		if u := Usage(tx, sets); len(u) != 1 || u[0].Used != 1 {
			t.Errorf("schema 1, read-only: Usage %+v, want 1 used", u)
		}
		if full := FullRangeSets(tx, sets); len(full) != 0 {
			t.Errorf("schema 1, read-only: FullRangeSets %v", full)
		}
		if recs, err := tx.ByOwner(old.ContainerID, old.IfName); err != nil || len(recs) != 1 {
			t.Errorf("schema 1, read-only: ByOwner %v, %v", recs, err)
		}
		return nil
	})
	ro.Close()

	s, err = Open(s.Path(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view(t, s, func(tx *Tx) error {
		if v := tx.meta.Get(keySchema); len(v) != 1 || v[0] != SchemaVersion {
			t.Errorf("schema after a read-write open: %v, want %d", v, SchemaVersion)
		}
		if tx.btx.Bucket(bucketOwnerNames) != nil {
			t.Error("schema 1's owners bucket kept after the upgrade")
		}
		checkIndex(t, tx)
		if tx.btx.Bucket(bucketTakenKeys) != nil || !tx.Taken(old.IP) || tx.Count() != 1 {
			t.Errorf("schema 1's taken keys not replaced by the bitmap: old bucket kept %v, Taken %v, Count %d",
				tx.btx.Bucket(bucketTakenKeys) != nil, tx.Taken(old.IP), tx.Count())
		}
		recs, err := tx.ByOwner(old.ContainerID, old.IfName)
		if err != nil || len(recs) != 1 {
			t.Fatalf("ByOwner: %v, %v", recs, err)
		}
		sameRecord(t, "schema 1 record", recs[0], old)
		got, err := tx.RangeSets()
		if err != nil || !reflect.DeepEqual(got, sets) {
			t.Errorf("RangeSets: %+v, %v", got, err)
		}
		return nil
	})
	update(t, s, func(tx *Tx) error {
		if err := tx.SetRangeSets(sets); err != nil {
			return err
		}
		if _, err := Release(tx, old.ContainerID, old.IfName, "DEL", "plugin", time.Now()); err != nil {
			return err
		}
		if isJSON(tx.meta.Get(keyRanges)) {
			t.Error("range sets still JSON after SetRangeSets")
		}
		return nil
	})
	view(t, s, func(tx *Tx) error {
		log, err := tx.AuditLog(10)
		if err != nil || len(log) != 2 || log[0].ContainerID != "gone" || log[1].ContainerID != old.ContainerID {
			t.Errorf("audit log mixing JSON and binary entries: %+v, %v", log, err)
		}
		return nil
	})
}
