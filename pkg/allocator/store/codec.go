package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Stored values (records, audit events, range sets) are written in a compact
// binary form: the plugin encodes or decodes a few of them at every exec, and
// the daemon decodes every record it has not seen, so the codec must be cheap
// from a cold start (no reflection; figures against encoding/json in
// docs/benchmarks.md). A value in any other form (say JSON) is
// damaged: its first byte is not binaryFormat.
//
// A binary value is: one format byte (binaryFormat), then its fields in a fixed
// order, each an unsigned or zigzag varint, a length-prefixed string, an
// address, or a time. A decoder refuses a value with bytes left over or
// missing: a damaged value is reported, never half-read.
const binaryFormat = 2

// recordWitnessFormat is a record's format when it carries a netns witness
// (allocator.NetnsWitness): binaryFormat's fields followed by the witness
// (values.go). A record without one is written in binaryFormat, byte for byte
// as before, so binaries that know only binaryFormat still read it; they
// refuse one with a witness as "newer" (docs/runbook.md, rollback). Only
// records use it.
const recordWitnessFormat = 3

// recordIdentityFormat is a record's format when its netns witness carries
// the directory's file handle or the namespace's identity
// (allocator.DirID.Handle, allocator.NetnsWitness.Netns): recordWitnessFormat's
// fields followed by the handle and the namespace's device and inode. A
// witness without either is written in recordWitnessFormat, byte for byte as
// before; binaries that know only formats up to 3 refuse this one as
// "newer" and quarantine the record (its address stays reserved;
// docs/contracts.md). Only records use it.
const recordIdentityFormat = 4

// recordNewestFormat is the newest record format this binary reads. Every
// record format starts with binaryFormat's fields.
const recordNewestFormat = recordIdentityFormat

var errShortValue = errors.New("value ends early")

// enc appends fields to a value.
type enc struct{ b []byte }

func newEnc(size int) *enc { return newEncFormat(size, binaryFormat) }

// newEncFormat starts a value of the given format byte.
func newEncFormat(size int, format byte) *enc {
	return &enc{b: append(make([]byte, 0, size), format)}
}

func (e *enc) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

func (e *enc) int(v int64) { e.b = binary.AppendVarint(e.b, v) }

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
	b      []byte
	err    error
	format byte // the value's format byte
}

// newDec checks the format byte and returns a decoder positioned after it.
func newDec(b []byte) *dec { return newDecUpTo(b, binaryFormat) }

// newDecUpTo is newDec for a value that may also be in a later format, up
// to newest (the caller reads dec.format).
func newDecUpTo(b []byte, newest byte) *dec {
	switch {
	case len(b) == 0:
		return &dec{err: errShortValue}
	case b[0] > newest:
		return &dec{err: fmt.Errorf("value format %d is newer than this binary's %d", b[0], newest)}
	case b[0] < binaryFormat:
		return &dec{err: fmt.Errorf("unknown value format %d", b[0])}
	}
	return &dec{b: b[1:], format: b[0]}
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
