package allocator

// What a store reports about damage it met: records that do not decode,
// values that do not decode, indexes that disagreed with the records.

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrDamagedValue wraps the error of a stored value other than a record
// (range sets, ...) that does not decode.
var ErrDamagedValue = errors.New("damaged stored value")

// DamagedRecord is a record whose stored value does not decode. Its address
// stays reserved until an operator releases it (ReleaseIP).
type DamagedRecord struct {
	// IP is the address its key names (invalid if the key is damaged too).
	IP netip.Addr
	// Err says why the value does not decode.
	Err error
	// Raw is a copy of the stored value.
	Raw []byte
	// ContainerID and IfName are the owner as far as the value could be read
	// before the damage ("" when not reached): a hint for humans and logs,
	// never used to release.
	ContainerID, IfName string
}

func (d DamagedRecord) String() string {
	s := fmt.Sprintf("damaged record at %s: %v", d.IP, d.Err)
	if d.ContainerID != "" {
		s += fmt.Sprintf(" (readable owner: container %s ifname %q)", d.ContainerID, d.IfName)
	}
	return s
}

// IndexRepair is what a comparison of the indexes with the records found
// (VerifyIndexes) or fixed (RepairIndexes).
type IndexRepair struct {
	Why     string // what made the caller look
	Records int    // records in allocs
	// BitsSet: records whose bit was clear; BitsCleared: bits with no record.
	BitsSet, BitsCleared int
	// OwnerAdded: records missing from the owner index; OwnerRemoved: index
	// entries that name no record of theirs.
	OwnerAdded, OwnerRemoved int
	// PodAdded: records with a pod UID missing from the pod index;
	// PodRemoved: pod index entries that name no record of that UID.
	PodAdded, PodRemoved int
	// CountWas is the records count meta held (-1: absent or damaged).
	CountWas int
}

// Changed reports whether any index disagreed with the records.
func (r IndexRepair) Changed() bool {
	return r.BitsSet+r.BitsCleared+r.OwnerAdded+r.OwnerRemoved+r.PodAdded+r.PodRemoved > 0 || r.CountWas != r.Records
}

func (r IndexRepair) String() string {
	s := fmt.Sprintf("%s: %d records; taken bitmap: %d bits set, %d cleared; owner index: %d entries added, %d removed",
		r.Why, r.Records, r.BitsSet, r.BitsCleared, r.OwnerAdded, r.OwnerRemoved)
	if r.PodAdded+r.PodRemoved > 0 {
		s += fmt.Sprintf("; pod index: %d entries added, %d removed", r.PodAdded, r.PodRemoved)
	}
	return s + fmt.Sprintf("; records count was %d", r.CountWas)
}

// ErrAddressReserved is returned by Put for an address whose record belongs to
// another owner or does not decode: a write never replaces another owner's
// record (Replace does, for the one caller that must).
var ErrAddressReserved = errors.New("address is held by another record")
