package store

import (
	"math/rand"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// sameRecord compares records field by field, times by instant.
func sameRecord(t *testing.T, name string, got, want *allocator.Record) {
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

func codecRecords() map[string]*allocator.Record {
	now := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	return map[string]*allocator.Record{
		"minimal": {IP: netip.MustParseAddr("10.0.0.2"), ContainerID: "c", IfName: "eth0", State: allocator.StatePending},
		"full v4": {
			IP: netip.MustParseAddr("10.1.255.254"), PrefixLen: 16, Gateway: netip.MustParseAddr("10.1.0.1"), RangeSet: 3,
			ContainerID: strings.Repeat("ab", 32), IfName: "net1", Network: "k8s-pod-network",
			PodNamespace: "kube-system", PodName: "coredns-5d78c9869d-x7x2k", PodUID: "0f9e4f8e-6a0b-4b9e-9c1e-3e3e3e3e3e3e",
			Netns: "/var/run/netns/cni-1234", State: allocator.StateCommitted, Source: "add", Created: now, Committed: now.Add(time.Second),
			Obs: allocator.Observation{Misses: 2, FirstMissed: now.Add(time.Minute), Verdict: "absent 2/3", SandboxState: "absent"},
		},
		"v6, imported outside every range": {
			IP: netip.MustParseAddr("fd00::ffff:1"), PrefixLen: 64, RangeSet: -1, ContainerID: "legacy",
			State: allocator.StateCommitted, Source: "host-local", Created: time.Unix(0, 0),
		},
		"unicode and empty strings": {IP: netip.MustParseAddr("192.168.0.9"), PodName: "pöd-ü", Obs: allocator.Observation{Verdict: "veto: pod \"a\"\n"}},
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
	ev := allocator.AuditEvent{Time: time.Unix(1700000000, 5).UTC(), Action: "reclaim", Reason: "absent: 3 sweeps", IP: netip.MustParseAddr("fd00::7"),
		ContainerID: "c1", IfName: "eth0", Pod: "ns/p", By: "hostlease-gc"}
	got, err := readAudit(appendAudit(&ev))
	if err != nil || !reflect.DeepEqual(got, ev) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, ev)
	}
	got, err = readAudit(appendAudit(&allocator.AuditEvent{}))
	if err != nil || !reflect.DeepEqual(got, allocator.AuditEvent{}) {
		t.Errorf("zero event: %+v, %v", got, err)
	}
}

func TestRangeSetsCodec(t *testing.T) {
	sets := []allocator.StoredRangeSet{
		{Ranges: []allocator.StoredRange{
			{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: netip.MustParseAddr("10.0.0.10"), End: netip.MustParseAddr("10.0.0.20"), Gateway: netip.MustParseAddr("10.0.0.1")},
			{Subnet: netip.MustParsePrefix("10.0.1.0/24"), Start: netip.MustParseAddr("10.0.1.1"), End: netip.MustParseAddr("10.0.1.254")},
		}},
		{Ranges: []allocator.StoredRange{{Subnet: netip.MustParsePrefix("fd00::/64"), Start: netip.MustParseAddr("fd00::1"), End: netip.MustParseAddr("fd00::ffff:ffff:ffff:ffff"), Gateway: netip.MustParseAddr("fd00::1")}}},
	}
	got, err := readRangeSets(appendRangeSets(sets))
	if err != nil || !reflect.DeepEqual(got, sets) {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, sets)
	}
}
