package allocator

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Tx is one transaction on a store. Every write keeps the derived indexes
// (takenbits, ownerhash, imported, the records count) in step with allocs: a
// record and its index entries are put and deleted together. The indexes are
// still only derived: where they are used to decide something that matters
// they are verified against the records (see integrity.go).
type Tx struct {
	btx                                                      *bolt.Tx
	meta, allocs, taken, owners, exhaustion, audit, imported *bolt.Bucket
	// reserved reads the reserved addresses: the taken bitmap (see wrapTx).
	reserved reservedIndex

	// damagedSeen are the undecodable records this transaction met (each
	// once); repairs the index repairs it made. Callers log them.
	damagedSeen []DamagedRecord
	repairs     []IndexRepair
	err         error // first write error of a multi-write helper
}

// addrKey encodes an address so that byte order is address order within a
// family: a family byte (4 or 6) followed by the address bytes.
func addrKey(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return []byte{4, b[0], b[1], b[2], b[3]}
	}
	b := a.As16()
	return append([]byte{6}, b[:]...)
}

func keyAddr(k []byte) (netip.Addr, bool) {
	switch {
	case len(k) == 5 && k[0] == 4:
		return netip.AddrFrom4([4]byte(k[1:])), true
	case len(k) == 17 && k[0] == 6:
		return netip.AddrFrom16([16]byte(k[1:])), true
	}
	return netip.Addr{}, false
}

// ownerPrefix is the owners index's key prefix for an attachment: an 8-byte
// hash of containerID \0 ifname; a key is the prefix followed by addrKey(ip).
// Short keys keep the index shallow (a /16's 65 536 entries in three levels
// instead of four: one page less to write per ADD and DEL); ByOwner compares
// each record's owner, so owners whose hashes collide are still told apart.
func ownerPrefix(containerID, ifname string) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8+17), ownerHash(containerID, ifname))
}

// ownerHash is FNV-1a (64 bit) of containerID \0 ifname. A variable so that
// tests can make every owner collide.
var ownerHash = func(containerID, ifname string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(containerID))
	h.Write([]byte{0})
	h.Write([]byte(ifname))
	return h.Sum64()
}

// Get returns the record holding ip, or nil. A record that does not decode
// is an error (see Lookup for one that tells the two apart).
func (tx *Tx) Get(ip netip.Addr) (*Record, error) {
	key := addrKey(ip)
	v := tx.allocs.Get(key)
	if v == nil {
		return nil, nil
	}
	return decodeAt(key, v)
}

// Lookup returns the record holding ip, or the damaged record there, or
// neither when the address has no record.
func (tx *Tx) Lookup(ip netip.Addr) (*Record, *DamagedRecord) {
	key := addrKey(ip)
	v := tx.allocs.Get(key)
	if v == nil {
		return nil, nil
	}
	r, err := decodeAt(key, v)
	if err != nil {
		d := newDamaged(key, v, err)
		return nil, &d
	}
	return r, nil
}

// Taken reports whether ip is reserved, without decoding the record. It reads
// the taken bitmap, a derived index: ADD verifies what it chooses against the
// records (see allocateOne).
func (tx *Tx) Taken(ip netip.Addr) bool { return tx.reserved.has(ip) }

// hasRecord reports whether ip has a record, healthy or damaged.
func (tx *Tx) hasRecord(ip netip.Addr) bool { return tx.allocs.Get(addrKey(ip)) != nil }

// ErrAddressHeld is returned by Put for an address whose record belongs to
// another owner or does not decode: a write never replaces another owner's
// record (Replace does, for the one caller that must).
var ErrAddressHeld = errors.New("address is held by another record")

// Put writes r under r.IP and indexes it by owner and in the taken index.
// The address must be free or held by r's own attachment (the same
// containerID and ifname): otherwise Put writes nothing and returns an error
// wrapping ErrAddressHeld.
func (tx *Tx) Put(r *Record) error {
	key := addrKey(r.IP)
	if old := tx.allocs.Get(key); old != nil {
		prev, err := decodeAt(key, old)
		if err != nil {
			return fmt.Errorf("%w: %s has a damaged record (%v); it stays reserved until released (hostlease-gc release %s)", ErrAddressHeld, r.IP, err, r.IP)
		}
		if prev.ContainerID != r.ContainerID || prev.IfName != r.IfName {
			return fmt.Errorf("%w: %s is held by container %s ifname %q, not %s ifname %q",
				ErrAddressHeld, r.IP, prev.ContainerID, prev.IfName, r.ContainerID, r.IfName)
		}
		return tx.putRecord(r, key, false)
	}
	return tx.putRecord(r, key, true)
}

// Replace writes r under r.IP whoever held the address, and returns what was
// there: the previous record (of any owner), or the damaged record, or
// neither. It is for the daemon's re-reservation of an address a running
// sandbox uses: the caller audits the takeover.
func (tx *Tx) Replace(r *Record) (*Record, *DamagedRecord, error) {
	key := addrKey(r.IP)
	old := tx.allocs.Get(key)
	if old == nil {
		return nil, nil, tx.putRecord(r, key, true)
	}
	prev, derr := decodeAt(key, old)
	var damaged *DamagedRecord
	if derr != nil {
		d := newDamaged(key, old, derr)
		damaged = &d
		// Its owner is unknown: drop whatever index entry points at it.
		if err := tx.dropOwnerEntries(key); err != nil {
			return nil, nil, err
		}
	} else if prev.ContainerID != r.ContainerID || prev.IfName != r.IfName {
		if err := tx.owners.Delete(append(ownerPrefix(prev.ContainerID, prev.IfName), key...)); err != nil {
			return nil, nil, err
		}
	}
	if err := tx.imported.Delete(key); err != nil {
		return nil, nil, err
	}
	return prev, damaged, tx.putRecord(r, key, false)
}

// putRecord stores r and its index entries; isNew says key had no record.
func (tx *Tx) putRecord(r *Record, key []byte, isNew bool) error {
	v, err := encodeRecord(r)
	if err != nil {
		return err
	}
	if err := tx.allocs.Put(key, v); err != nil {
		return err
	}
	if err := (takenBits{tx.taken}).set(r.IP, true); err != nil {
		return err
	}
	if err := tx.owners.Put(append(ownerPrefix(r.ContainerID, r.IfName), key...), nil); err != nil {
		return err
	}
	if isNew {
		return tx.addRecords(1)
	}
	return nil
}

// Delete removes the record holding ip (and its index entries) and returns
// it, or nil when the address was free. A damaged record is removed too and
// returned as a Record with only its IP set.
func (tx *Tx) Delete(ip netip.Addr) (*Record, error) {
	key := addrKey(ip)
	v := tx.allocs.Get(key)
	if v == nil {
		return nil, nil
	}
	r, err := decodeAt(key, v)
	if err != nil {
		return &Record{IP: ip}, tx.deleteDamaged(key, ip)
	}
	return r, tx.deleteRead(r)
}

// deleteDamaged removes the undecodable record under key and every index
// entry pointing at it (its owner is unknown, so the owner index is searched).
func (tx *Tx) deleteDamaged(key []byte, ip netip.Addr) error {
	if err := tx.dropOwnerEntries(key); err != nil {
		return err
	}
	if err := tx.allocs.Delete(key); err != nil {
		return err
	}
	if err := tx.imported.Delete(key); err != nil {
		return err
	}
	if ip.IsValid() {
		if err := (takenBits{tx.taken}).set(ip, false); err != nil {
			return err
		}
	}
	return tx.addRecords(-1)
}

// dropOwnerEntries deletes every owner index entry for the address key (a
// walk of the index: only for records whose owner cannot be read).
func (tx *Tx) dropOwnerEntries(key []byte) error {
	var drop [][]byte
	c := tx.owners.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) == 8+len(key) && bytes.Equal(k[8:], key) {
			drop = append(drop, bytes.Clone(k))
		}
	}
	for _, k := range drop {
		if err := tx.owners.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteRead removes r, read from this transaction (so its owner is the
// stored one), without reading and decoding it again.
func (tx *Tx) deleteRead(r *Record) error {
	key := addrKey(r.IP)
	if err := tx.owners.Delete(append(ownerPrefix(r.ContainerID, r.IfName), key...)); err != nil {
		return err
	}
	if err := tx.allocs.Delete(key); err != nil {
		return err
	}
	// Deleting a key that is not there touches no page.
	if err := tx.imported.Delete(key); err != nil {
		return err
	}
	if err := (takenBits{tx.taken}).set(r.IP, false); err != nil {
		return err
	}
	return tx.addRecords(-1)
}

// recordCount is the records count kept in meta, or false when it is absent
// or damaged (a store not yet opened read-write by this version).
func (tx *Tx) recordCount() (int, bool) {
	if tx.meta == nil {
		return 0, false
	}
	v := tx.meta.Get(keyRecords)
	if len(v) != 8 {
		return 0, false
	}
	return int(binary.BigEndian.Uint64(v)), true
}

// addRecords moves the records count by d. An absent count stays absent
// (the next read-write open counts the records).
func (tx *Tx) addRecords(d int) error {
	n, ok := tx.recordCount()
	if !ok {
		return nil
	}
	return tx.setRecordCount(max(n+d, 0))
}

func (tx *Tx) setRecordCount(n int) error {
	return tx.meta.Put(keyRecords, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// ByOwner returns the records held by (containerID, ifname), in address
// order, as the owner index lists them. A listed record that does not decode
// is skipped and noted (DamagedSeen): its address stays reserved. ByOwner
// trusts the index to be complete; Held verifies that before concluding that
// an attachment holds nothing.
func (tx *Tx) ByOwner(containerID, ifname string) ([]*Record, error) {
	var out []*Record
	if tx.owners == nil {
		// A read-only view of a store that lost its owner index (damage;
		// the next read-write open restores it): look at every record.
		return tx.scanOwner(containerID, ifname), nil
	}
	prefix := ownerPrefix(containerID, ifname)
	c := tx.owners.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		key := k[len(prefix):]
		v := tx.allocs.Get(key)
		if v == nil {
			continue
		}
		r, err := decodeAt(key, v)
		if err != nil {
			tx.noteDamaged(newDamaged(key, v, err))
			continue
		}
		if r.ContainerID == containerID && r.IfName == ifname {
			out = append(out, r)
		}
	}
	return out, nil
}

// scanOwner finds (containerID, ifname)'s records by reading every record:
// the answer when the owner index cannot be trusted. Damaged records are
// noted, not returned.
func (tx *Tx) scanOwner(containerID, ifname string) []*Record {
	var out []*Record
	_ = tx.allocs.ForEach(func(k, v []byte) error {
		if match, sure := ownerMatches(v, containerID, ifname); sure && !match {
			return nil // most records: told apart without decoding
		}
		r, err := decodeAt(k, v)
		if err != nil {
			tx.noteDamaged(newDamaged(k, v, err))
			return nil
		}
		if r.ContainerID == containerID && r.IfName == ifname {
			out = append(out, r)
		}
		return nil
	})
	return out
}

// ownerMatches compares a binary record's owner fields with (containerID,
// ifname) in place, without decoding the record; sure is false when it cannot
// tell (a damaged value: the caller decodes).
func ownerMatches(v []byte, containerID, ifname string) (match, sure bool) {
	if len(v) == 0 || v[0] != binaryFormat {
		return false, false
	}
	d := &dec{b: v[1:]}
	d.addr()
	d.smallInt()
	d.addr()
	d.smallInt()
	id := d.bytes()
	name := d.bytes()
	if d.err != nil {
		return false, false
	}
	return string(id) == containerID && string(name) == ifname, true
}

// ForEach calls fn for every record that decodes, in address order; records
// that do not are skipped and noted (DamagedSeen, or DamagedRecords for all
// of them). fn must not write.
func (tx *Tx) ForEach(fn func(*Record) error) error {
	return tx.allocs.ForEach(func(k, v []byte) error {
		r, err := decodeAt(k, v)
		if err != nil {
			tx.noteDamaged(newDamaged(k, v, err))
			return nil
		}
		return fn(r)
	})
}

// Count is the number of reserved addresses (it counts the taken bitmap's bits).
func (tx *Tx) Count() int { return tx.reserved.count() }

// Network is the network name the store was first written for ("" if never).
func (tx *Tx) Network() string { return string(tx.meta.Get(keyNetwork)) }

// SetNetwork records the store's network name once.
func (tx *Tx) SetNetwork(name string) error {
	if string(tx.meta.Get(keyNetwork)) == name {
		return nil
	}
	return tx.meta.Put(keyNetwork, []byte(name))
}

func lastReservedKey(rangeSet int) []byte { return []byte("last_reserved." + strconv.Itoa(rangeSet)) }

// LastReserved is the address last reserved in range set idx (host-local's
// last_reserved_ip.N), the point round-robin allocation continues from.
func (tx *Tx) LastReserved(idx int) (netip.Addr, bool) {
	ip, ok := keyAddr(tx.meta.Get(lastReservedKey(idx)))
	return ip, ok
}

// SetLastReserved moves range set idx's round-robin point.
func (tx *Tx) SetLastReserved(idx int, ip netip.Addr) error {
	return tx.meta.Put(lastReservedKey(idx), addrKey(ip))
}

// StoredRangeSet is a range set as the plugin last configured it, so that the
// daemon and CLI can size pools without reading CNI configs.
type StoredRangeSet struct {
	Ranges []StoredRange `json:"ranges"`
}

// StoredRange is one canonical range: every address from Start to End
// inclusive except Gateway is allocatable.
type StoredRange struct {
	Subnet  netip.Prefix `json:"subnet"`
	Start   netip.Addr   `json:"start"`
	End     netip.Addr   `json:"end"`
	Gateway netip.Addr   `json:"gateway,omitzero"`
}

// RangeSets returns the range sets recorded by the last ADD. A stored value
// that does not decode is an error wrapping ErrDamagedValue (the next ADD
// rewrites it): callers that can do without the range sets carry on.
func (tx *Tx) RangeSets() ([]StoredRangeSet, error) {
	v := tx.meta.Get(keyRanges)
	if v == nil {
		return nil, nil
	}
	out, err := readRangeSets(v)
	if err != nil {
		return nil, fmt.Errorf("%w: stored range sets: %v", ErrDamagedValue, err)
	}
	return out, nil
}

// SetRangeSets records the configured range sets; a no-op write is skipped so
// the common ADD does not rewrite the meta page for nothing.
func (tx *Tx) SetRangeSets(sets []StoredRangeSet) error {
	v := appendRangeSets(sets)
	if bytes.Equal(tx.meta.Get(keyRanges), v) {
		return nil
	}
	return tx.meta.Put(keyRanges, v)
}

// RecordExhaustion counts one ADD that found range set idx full.
func (tx *Tx) RecordExhaustion(idx int, desc string, now time.Time) error {
	key := []byte(strconv.Itoa(idx))
	var e Exhaustion
	if v := tx.exhaustion.Get(key); v != nil {
		_ = json.Unmarshal(v, &e)
	}
	e.Count++
	e.Last = now
	e.RangeSet = desc
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return tx.exhaustion.Put(key, v)
}

// Exhaustions returns the exhaustion counters by range set index.
func (tx *Tx) Exhaustions() (map[int]Exhaustion, error) {
	out := map[int]Exhaustion{}
	err := tx.exhaustion.ForEach(func(k, v []byte) error {
		idx, err := strconv.Atoi(string(k))
		if err != nil {
			return nil
		}
		var e Exhaustion
		if err := json.Unmarshal(v, &e); err != nil {
			return nil // a damaged counter is left out; the next exhaustion rewrites it
		}
		out[idx] = e
		return nil
	})
	return out, err
}

// Audit appends ev to the bounded audit log. The oldest entries are dropped
// auditPrune at a time, so the log holds between auditLimit and
// auditLimit+auditPrune-1 entries and most appends touch only the log's end.
func (tx *Tx) Audit(ev AuditEvent) error {
	seq, err := tx.audit.NextSequence()
	if err != nil {
		return err
	}
	if err := tx.audit.Put(binary.BigEndian.AppendUint64(nil, seq), appendAudit(&ev)); err != nil {
		return err
	}
	if seq%auditPrune != 0 || seq <= auditLimit {
		return nil
	}
	// Entries are dense: everything up to seq-auditLimit falls out of the window.
	cutoff := binary.BigEndian.AppendUint64(nil, seq-auditLimit)
	var old [][]byte
	c := tx.audit.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, cutoff) <= 0; k, _ = c.Next() {
		old = append(old, bytes.Clone(k))
	}
	for _, k := range old {
		if err := tx.audit.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// AuditLog returns up to limit most recent audit events, oldest first.
func (tx *Tx) AuditLog(limit int) ([]AuditEvent, error) {
	var out []AuditEvent
	c := tx.audit.Cursor()
	for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
		ev, err := readAudit(v)
		if err != nil {
			// A damaged entry is shown as such; it never hides the others.
			ev = AuditEvent{Action: AuditDamagedEntry, Reason: err.Error()}
		}
		out = append(out, ev)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

var keyImported = []byte("hostlocal_imported")

// MigrateOnce imports host-local state from dir the first time any write
// transaction runs on this store, so an address in use under host-local is never
// handed out again. Later calls cost one key lookup.
func (tx *Tx) MigrateOnce(dir, network string, sets []StoredRangeSet, now time.Time) (int, error) {
	if tx.meta.Get(keyImported) != nil {
		return 0, nil
	}
	n, err := ImportHostLocal(tx, dir, network, sets, now)
	if err != nil {
		return n, err
	}
	return n, tx.meta.Put(keyImported, []byte(now.UTC().Format(time.RFC3339)))
}
