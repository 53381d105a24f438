package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Stored values (records, audit events, range sets) are written in a compact
// binary form: the plugin encodes or decodes a few of them at every exec, and
// the daemon decodes every record it has not seen, so the codec must be cheap
// from a cold start (no reflection). A value in any other form (say JSON) is
// damaged: its first byte is not binaryFormat.
//
// A binary value is: one format byte (binaryFormat), then its fields in a fixed
// order, each an unsigned or zigzag varint, a length-prefixed string, an
// address, or a time. A decoder refuses a value with bytes left over or
// missing: a damaged value is reported, never half-read.
const binaryFormat = 2

var errShortValue = errors.New("value ends early")

// enc appends fields to a value.
type enc struct{ b []byte }

func newEnc(size int) *enc { return &enc{b: append(make([]byte, 0, size), binaryFormat)} }

func (e *enc) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }

func (e *enc) str(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

// addr writes an address as its family byte and bytes (addrKey's form), or a
// single 0 for no address.
func (e *enc) addr(a netip.Addr) {
	if !a.IsValid() {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(e.b, addrKey(a)...)
}

// time writes Unix nanoseconds plus one, so that 0 is the zero time. Times a
// store holds lie well inside int64 nanoseconds (years 1678-2262).
func (e *enc) time(t time.Time) {
	if t.IsZero() {
		e.int(0)
		return
	}
	e.int(t.UnixNano() + 1)
}

// dec reads fields back; the first error sticks and later reads return zero values.
type dec struct {
	b   []byte
	err error
}

// newDec checks the format byte and returns a decoder positioned after it.
func newDec(b []byte) *dec {
	switch {
	case len(b) == 0:
		return &dec{err: errShortValue}
	case b[0] > binaryFormat:
		return &dec{err: fmt.Errorf("value format %d is newer than this binary's %d", b[0], binaryFormat)}
	case b[0] != binaryFormat:
		return &dec{err: fmt.Errorf("unknown value format %d", b[0])}
	}
	return &dec{b: b[1:]}
}

func (d *dec) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *dec) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShortValue)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShortValue)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// small reads an unsigned varint that must fit an int (counts, indexes, lengths).
func (d *dec) small() int {
	v := d.uint()
	if v > math.MaxInt32 {
		d.fail(fmt.Errorf("count %d out of range", v))
		return 0
	}
	return int(v)
}

// smallInt reads a signed varint that must fit an int32.
func (d *dec) smallInt() int {
	v := d.int()
	if v > math.MaxInt32 || v < math.MinInt32 {
		d.fail(fmt.Errorf("number %d out of range", v))
		return 0
	}
	return int(v)
}

func (d *dec) str() string {
	n := d.small()
	if d.err != nil {
		return ""
	}
	if n > len(d.b) {
		d.fail(errShortValue)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// bytes reads a length-prefixed string in place (no copy).
func (d *dec) bytes() []byte {
	n := d.small()
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail(errShortValue)
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *dec) addr() netip.Addr {
	if d.err != nil {
		return netip.Addr{}
	}
	if len(d.b) == 0 {
		d.fail(errShortValue)
		return netip.Addr{}
	}
	var size int
	switch d.b[0] {
	case 0:
		d.b = d.b[1:]
		return netip.Addr{}
	case 4:
		size = 5
	case 6:
		size = 17
	default:
		d.fail(fmt.Errorf("unknown address family %d", d.b[0]))
		return netip.Addr{}
	}
	if size > len(d.b) {
		d.fail(errShortValue)
		return netip.Addr{}
	}
	a, _ := keyAddr(d.b[:size])
	d.b = d.b[size:]
	return a
}

func (d *dec) time() time.Time {
	v := d.int()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v-1).UTC()
}

// done returns the first error, or an error if bytes are left over.
func (d *dec) done() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d unexpected bytes at the end", len(d.b))
	}
	return d.err
}

// appendRecord encodes r. The field order is the format: change it only with
// a new binaryFormat.
func appendRecord(r *allocator.Record) []byte {
	e := newEnc(96 + len(r.ContainerID) + len(r.Netns) + len(r.PodName) + len(r.PodNamespace) + len(r.PodUID))
	e.addr(r.IP)
	e.int(int64(r.PrefixLen))
	e.addr(r.Gateway)
	e.int(int64(r.RangeSet)) // -1: imported, outside every configured range
	e.str(r.ContainerID)
	e.str(r.IfName)
	e.str(r.Network)
	e.str(r.PodNamespace)
	e.str(r.PodName)
	e.str(r.PodUID)
	e.str(r.Netns)
	e.str(string(r.State))
	e.str(r.Source)
	e.time(r.Created)
	e.time(r.Committed)
	e.int(int64(r.Obs.Misses))
	e.time(r.Obs.FirstMissed)
	e.str(r.Obs.Verdict)
	e.str(r.Obs.SandboxState)
	return e.b
}

func readRecord(b []byte) (*allocator.Record, error) {
	d := newDec(b)
	r := &allocator.Record{Version: binaryFormat}
	r.IP = d.addr()
	r.PrefixLen = d.smallInt()
	r.Gateway = d.addr()
	r.RangeSet = d.smallInt()
	r.ContainerID = d.str()
	r.IfName = d.str()
	r.Network = d.str()
	r.PodNamespace = d.str()
	r.PodName = d.str()
	r.PodUID = d.str()
	r.Netns = d.str()
	r.State = allocator.State(d.str())
	r.Source = d.str()
	r.Created = d.time()
	r.Committed = d.time()
	r.Obs.Misses = d.smallInt()
	r.Obs.FirstMissed = d.time()
	r.Obs.Verdict = d.str()
	r.Obs.SandboxState = d.str()
	if err := d.done(); err != nil {
		return nil, err
	}
	if !r.IP.IsValid() {
		return nil, errors.New("record without an address")
	}
	return r, nil
}

func appendAudit(ev *allocator.AuditEvent) []byte {
	e := newEnc(64 + len(ev.ContainerID) + len(ev.Reason) + len(ev.Pod))
	e.time(ev.Time)
	e.str(ev.Action)
	e.str(ev.Reason)
	e.addr(ev.IP)
	e.str(ev.ContainerID)
	e.str(ev.IfName)
	e.str(ev.Pod)
	e.str(ev.By)
	return e.b
}

func readAudit(b []byte) (allocator.AuditEvent, error) {
	d := newDec(b)
	var ev allocator.AuditEvent
	ev.Time = d.time()
	ev.Action = d.str()
	ev.Reason = d.str()
	ev.IP = d.addr()
	ev.ContainerID = d.str()
	ev.IfName = d.str()
	ev.Pod = d.str()
	ev.By = d.str()
	return ev, d.done()
}

func appendRangeSets(sets []allocator.StoredRangeSet) []byte {
	e := newEnc(8 + 40*len(sets))
	e.uint(uint64(len(sets)))
	for _, s := range sets {
		e.uint(uint64(len(s.Ranges)))
		for _, r := range s.Ranges {
			e.addr(r.Subnet.Addr())
			e.uint(uint64(r.Subnet.Bits()))
			e.addr(r.Start)
			e.addr(r.End)
			e.addr(r.Gateway)
		}
	}
	return e.b
}

func readRangeSets(b []byte) ([]allocator.StoredRangeSet, error) {
	d := newDec(b)
	n := d.small()
	var out []allocator.StoredRangeSet
	for i := 0; i < n && d.err == nil; i++ {
		m := d.small()
		var set allocator.StoredRangeSet
		for j := 0; j < m && d.err == nil; j++ {
			var r allocator.StoredRange
			a := d.addr()
			bits := d.small()
			if d.err == nil {
				if r.Subnet = netip.PrefixFrom(a, bits); !r.Subnet.IsValid() {
					d.fail(fmt.Errorf("invalid subnet %s/%d", a, bits))
				}
			}
			r.Start, r.End, r.Gateway = d.addr(), d.addr(), d.addr()
			set.Ranges = append(set.Ranges, r)
		}
		out = append(out, set)
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	return out, nil
}

func encodeRecord(r *allocator.Record) ([]byte, error) {
	r.Version = binaryFormat
	return appendRecord(r), nil
}

// decodeAt reads the record stored under key: decodeRecord, and the address
// it names must be the key's. A record naming another address is damaged (a
// write of it would touch the other address's record and index entries).
func decodeAt(key, v []byte) (*allocator.Record, error) {
	r, err := decodeRecord(v)
	if err != nil {
		return nil, err
	}
	if ip, ok := keyAddr(key); !ok || ip != r.IP {
		return nil, fmt.Errorf("undecodable record: it names %s but is stored under key %x", r.IP, key)
	}
	return r, nil
}

// decodeRecord reads a stored record (the binary form above).
func decodeRecord(b []byte) (*allocator.Record, error) {
	r, err := readRecord(b)
	if err != nil {
		return nil, fmt.Errorf("undecodable record: %w", err)
	}
	return r, nil
}
