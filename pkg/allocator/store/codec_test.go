package store

import (
	"bytes"
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
		"netns witness": {
			IP: netip.MustParseAddr("10.0.0.3"), PrefixLen: 24, ContainerID: "c3", IfName: "eth0", Netns: "/var/run/netns/cni-3", State: allocator.StatePending,
			Source: "add", Created: now, NetnsWitness: allocator.NetnsWitness{Dir: allocator.DirID{Dev: 1<<40 + 25, Ino: 1<<33 + 7}, Existed: true},
		},
		"netns identity": {
			IP: netip.MustParseAddr("10.0.0.5"), PrefixLen: 24, ContainerID: "c5", IfName: "eth0", Netns: "/var/run/netns/cni-5", State: allocator.StatePending,
			Source: "add", Created: now, NetnsWitness: allocator.NetnsWitness{Dir: allocator.DirID{Dev: 39, Ino: 1, Handle: "\x01\x00\x00\x00\x39\xaf\xe2\xea\x01\x00\x00\x00\x00\x00\x00\x00"}, Existed: true,
				Netns: allocator.NsID{Dev: 4, Ino: 4026532177}},
		},
		"netns identity, netns did not exist": {
			IP: netip.MustParseAddr("fd00::5"), ContainerID: "c6", Netns: "/run/netns/y", Created: now,
			NetnsWitness: allocator.NetnsWitness{Dir: allocator.DirID{Dev: 39, Ino: 1, Handle: "h"}},
		},
		"netns witness, netns did not exist": {
			IP: netip.MustParseAddr("fd00::3"), ContainerID: "c4", Netns: "/run/netns/x", Created: now,
			NetnsWitness: allocator.NetnsWitness{Dir: allocator.DirID{Dev: 0, Ino: 2}},
		},
	}
}

func TestRecordCodecRoundTrip(t *testing.T) {
	for name, r := range codecRecords() {
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		want := byte(binaryFormat)
		switch w := r.NetnsWitness; {
		case w.Dir.Handle != "" || w.Netns.Known():
			want = recordIdentityFormat
		case w.Known():
			want = recordWitnessFormat
		}
		if b[0] != want {
			t.Errorf("%s: encoded as format %d, want %d", name, b[0], want)
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameRecord(t, name, got, r)
	}
}

func TestRecordCodecRefusesDamage(t *testing.T) {
	for _, name := range []string{"full v4", "netns witness", "netns identity"} {
		b, _ := encodeRecord(codecRecords()[name])
		for n := 0; n < len(b); n++ {
			if r, err := decodeRecord(b[:n]); err == nil {
				t.Fatalf("%s: decoded a record cut to %d of %d bytes: %+v", name, n, len(b), r)
			}
		}
		if _, err := decodeRecord(append(b, 0)); err == nil || !strings.Contains(err.Error(), "unexpected bytes") {
			t.Errorf("%s: trailing byte: err %v, want unexpected bytes", name, err)
		}
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

// A record without a netns witness is written exactly as before the witness
// existed (binaryFormat), so older binaries still read it; one with a witness
// is the same fields in recordWitnessFormat followed by the witness, and is
// refused by a binary that knows only binaryFormat as newer, never misread.
func TestRecordWitnessFormat(t *testing.T) {
	w := codecRecords()["netns witness"]
	plain := *w
	plain.NetnsWitness = allocator.NetnsWitness{}
	withB, _ := encodeRecord(w)
	plainB, _ := encodeRecord(&plain)
	if plainB[0] != binaryFormat || withB[0] != recordWitnessFormat {
		t.Fatalf("formats %d and %d", plainB[0], withB[0])
	}
	if !bytes.Equal(withB[1:len(plainB)], plainB[1:]) {
		t.Fatalf("the witness format does not start with the plain record's fields:\n%x\n%x", withB, plainB)
	}
	// A record stored by a binary that predates the witness decodes with none.
	got, err := decodeRecord(plainB)
	if err != nil || got.NetnsWitness.Known() || got.Version != binaryFormat {
		t.Fatalf("plain record: %+v, %v", got, err)
	}
	// What a binary that knows only binaryFormat says of a witness record.
	if err := newDec(withB).err; err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("a binaryFormat-only decoder: %v, want newer", err)
	}
	// The owner fields are read in place in both formats.
	for _, b := range [][]byte{plainB, withB} {
		if match, sure := ownerMatches(b, w.Attachment()); !match || !sure {
			t.Errorf("format %d: ownerMatches = %v, %v", b[0], match, sure)
		}
	}
	// A damaged record's owner is salvaged in both formats.
	for _, b := range [][]byte{plainB, withB} {
		if got := salvageOwner(b[:len(b)-1]); got != w.Attachment() {
			t.Errorf("format %d, cut short: salvaged owner %+v", b[0], got)
		}
	}
	bad := func(name string, mutate func(e *enc)) {
		t.Helper()
		e := newEncFormat(0, recordWitnessFormat)
		e.b = append(e.b, plainB[1:]...)
		mutate(e)
		if r, err := decodeRecord(e.b); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		}
	}
	bad("inode 0", func(e *enc) { e.uint(5); e.uint(0); e.uint(1) })
	bad("unknown flag", func(e *enc) { e.uint(5); e.uint(9); e.uint(3) })
	bad("no witness fields", func(*enc) {})
	withB[0] = recordNewestFormat + 1
	if _, err := decodeRecord(withB); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a later format: %v, want newer", err)
	}
}

// A witness with a file handle or its namespace's identity is
// recordWitnessFormat's fields in recordIdentityFormat followed by them; a
// binary that knows formats up to recordWitnessFormat refuses it as newer
// (and so quarantines the record: its address stays reserved), never
// misreads it; owners are read in place and salvaged from it.
func TestRecordIdentityFormat(t *testing.T) {
	r := codecRecords()["netns identity"]
	old := *r
	old.NetnsWitness.Dir.Handle, old.NetnsWitness.Netns = "", allocator.NsID{}
	newB, _ := encodeRecord(r)
	oldB, _ := encodeRecord(&old)
	if oldB[0] != recordWitnessFormat || newB[0] != recordIdentityFormat {
		t.Fatalf("formats %d and %d", oldB[0], newB[0])
	}
	if !bytes.Equal(newB[1:len(oldB)], oldB[1:]) {
		t.Fatalf("the identity format does not start with the witness format's fields:\n%x\n%x", newB, oldB)
	}
	if err := newDecUpTo(newB, recordWitnessFormat).err; err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("a decoder that knows formats up to %d: %v, want newer", recordWitnessFormat, err)
	}
	if match, sure := ownerMatches(newB, r.Attachment()); !match || !sure {
		t.Errorf("ownerMatches = %v, %v", match, sure)
	}
	if got := salvageOwner(newB[:len(newB)-1]); got != r.Attachment() {
		t.Errorf("cut short: salvaged owner %+v", got)
	}
	e := newEncFormat(0, recordIdentityFormat)
	e.b = append(e.b, oldB[1:]...)
	e.str("")
	e.uint(0)
	e.uint(0)
	if got, err := decodeRecord(e.b); err == nil {
		t.Errorf("identity format naming neither a handle nor a namespace: decoded %+v", got)
	}
}
