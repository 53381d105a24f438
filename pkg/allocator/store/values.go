package store

// The layouts of the stored values (records, audit entries, range sets) in
// the binary form of codec.go. The field order of each is its format:
// change it only with a new binaryFormat.

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// appendRecord encodes r. The field order is the format: change it only with
// a new binaryFormat. A record with a netns witness is in
// recordWitnessFormat: the same fields, then the witness's device, inode and
// flags (netnsExisted); in recordIdentityFormat when the witness has a file
// handle or names its namespace: then also the handle and the namespace's
// device and inode.
func appendRecord(r *allocator.Record) []byte {
	w := r.NetnsWitness
	format := byte(binaryFormat)
	switch {
	case w.Known() && (w.Dir.Handle != "" || w.Netns.Known()):
		format = recordIdentityFormat
	case w.Known():
		format = recordWitnessFormat
	}
	e := newEncFormat(96+len(r.ContainerID)+len(r.Netns)+len(r.PodName)+len(r.PodNamespace)+len(r.PodUID)+len(w.Dir.Handle), format)
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
	if format >= recordWitnessFormat {
		e.uint(w.Dir.Dev)
		e.uint(w.Dir.Ino)
		flags := uint64(0)
		if w.Existed {
			flags |= netnsExisted
		}
		e.uint(flags)
	}
	if format >= recordIdentityFormat {
		e.str(string(w.Dir.Handle))
		e.uint(w.Netns.Dev)
		e.uint(w.Netns.Ino)
	}
	return e.b
}

// Flags of a record's netns witness.
const netnsExisted = 1

func readRecord(b []byte) (*allocator.Record, error) {
	d := newDecUpTo(b, recordNewestFormat)
	r := &allocator.Record{Version: int(d.format)}

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
	if d.format >= recordWitnessFormat {
		r.NetnsWitness.Dir = allocator.DirID{Dev: d.uint(), Ino: d.uint()}
		flags := d.uint()
		r.NetnsWitness.Existed = flags&netnsExisted != 0
		if d.format >= recordIdentityFormat {
			r.NetnsWitness.Dir.Handle = allocator.FileHandle(d.str())
			r.NetnsWitness.Netns = allocator.NsID{Dev: d.uint(), Ino: d.uint()}
		}
		switch {
		case d.err != nil:
		case !r.NetnsWitness.Known():
			d.fail(errors.New("netns witness without an inode"))
		case flags&^netnsExisted != 0:
			d.fail(fmt.Errorf("unknown netns witness flags %#x", flags))
		case d.format >= recordIdentityFormat && r.NetnsWitness.Dir.Handle == "" && !r.NetnsWitness.Netns.Known():
			d.fail(errors.New("netns identity format without a handle or a namespace"))
		}
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	if !r.IP.IsValid() {
		return nil, errors.New("record without an address")
	}
	return r, nil
}

// appendAudit encodes an audit event: in binaryFormat, or, when it names a
// pod UID, in auditPodFormat (binaryFormat's fields, then the UID; binaries
// that know only binaryFormat show it as a damaged entry).
func appendAudit(ev *allocator.AuditEvent) []byte {
	format := byte(binaryFormat)
	if ev.PodUID != "" {
		format = auditPodFormat
	}
	e := newEncFormat(64+len(ev.ContainerID)+len(ev.Reason)+len(ev.Pod)+len(ev.PodUID), format)
	e.time(ev.Time)
	e.str(ev.Action)
	e.str(ev.Reason)
	e.addr(ev.IP)
	e.str(ev.ContainerID)
	e.str(ev.IfName)
	e.str(ev.Pod)
	e.str(ev.By)
	if format == auditPodFormat {
		e.str(ev.PodUID)
	}
	return e.b
}

// auditPodFormat is an audit event's format when it names a pod UID.
const auditPodFormat = 3

func readAudit(b []byte) (allocator.AuditEvent, error) {
	d := newDecUpTo(b, auditPodFormat)
	var ev allocator.AuditEvent
	ev.Time = d.time()
	ev.Action = d.str()
	ev.Reason = d.str()
	ev.IP = d.addr()
	ev.ContainerID = d.str()
	ev.IfName = d.str()
	ev.Pod = d.str()
	ev.By = d.str()
	if d.format == auditPodFormat {
		ev.PodUID = d.str()
	}
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
	b := appendRecord(r)
	r.Version = int(b[0])
	return b, nil
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

// decodeRecord reads a stored record (values.go).
func decodeRecord(b []byte) (*allocator.Record, error) {
	r, err := readRecord(b)
	if err != nil {
		return nil, fmt.Errorf("undecodable record: %w", err)
	}
	return r, nil
}
