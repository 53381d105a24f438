package store

// The owner index (ownerhash): an attachment's records without reading the
// others.

import (
	"fmt"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// scanOwner finds attachment a's records by reading every record: the
// answer when the owner index cannot be trusted. Damaged records are noted,
// not returned.
func (tx *Tx) scanOwner(a allocator.Attachment) []*allocator.Record {
	var out []*allocator.Record
	_ = tx.allocs.ForEach(func(k, v []byte) error {
		if match, sure := ownerMatches(v, a); sure && !match {
			return nil // most records: told apart without decoding
		}
		r, err := decodeAt(k, v)
		if err != nil {
			tx.noteDamaged(newDamaged(k, v, err))
			return nil
		}
		if r.Attachment() == a {
			out = append(out, r)
		}
		return nil
	})
	return out
}

// ownerMatches compares a binary record's owner fields with attachment a in
// place, without decoding the record; sure is false when it cannot tell (a
// damaged value: the caller decodes).
func ownerMatches(v []byte, a allocator.Attachment) (match, sure bool) {
	if len(v) == 0 || v[0] < binaryFormat || v[0] > recordNewestFormat { // the same leading fields in every record format
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
	return string(id) == a.ContainerID && string(name) == a.IfName, true
}

// scanAlwaysBelow is the number of records below which an owner the index
// does not know is always looked for in the records: a scan of that many
// costs about what the exec of the plugin does, and it also finds an index
// entry filed under the wrong owner, which keeps every count equal. A node's
// pool is usually far smaller (a /24).
const scanAlwaysBelow = 2048

// needScan decides whether an attachment the owner index does not know must
// be looked for in the records. records is the count kept in meta (known is
// false when it is absent or damaged); agree is the cheap count comparison
// (Tx.indexesAgree), called only for large stores.
func needScan(records int, known bool, agree func() bool) bool {
	switch {
	case !known:
		return true
	case records == 0:
		return !agree() // nothing should be there; stray index entries say otherwise
	case records < scanAlwaysBelow:
		return true
	}
	return !agree()
}

// verifyNone is the check behind Query.Verify for an attachment the owner
// index lists no record of: the empty answer is believed only for a large
// store whose indexes agree with the records count (needScan;
// indexesAgree reads no record); otherwise the records are read, and in a
// write transaction the indexes are repaired from them when they disagree
// (audited; Repairs).
func (tx *Tx) verifyNone(a allocator.Attachment) ([]*allocator.Record, error) {
	n, known := tx.recordCount()
	if !needScan(n, known, tx.indexesAgree) {
		return nil, nil
	}
	recs := tx.scanOwner(a)
	if tx.btx.Writable() && (len(recs) > 0 || !tx.indexesAgree()) {
		why := fmt.Sprintf("lookup of container %s ifname %q: the indexes disagree with the records count", a.ContainerID, a.IfName)
		if len(recs) > 0 {
			why = fmt.Sprintf("lookup of container %s ifname %q: %d records missing from the owner index", a.ContainerID, a.IfName, len(recs))
		}
		if _, err := tx.RepairIndexes(why, time.Now()); err != nil {
			return nil, err
		}
	}
	return recs, nil
}
