package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	bolt "go.etcd.io/bbolt"
)

// The root page lists the store's buckets: for each, a leaf element whose
// bucket flag says "a bucket" and whose value is the bucket's header (its
// root page, 0 for an inline bucket followed by its page, and a sequence).
// One flipped bit there makes a whole bucket a plain value, and one wrong
// root page number makes bbolt read another page as the bucket. Every open
// checks the entries of the buckets it knows (rootFaults), on the pages' headers
// only (no record is read):
//
//   - A derived bucket (the indexes, the exhaustion counters, the audit log
//     and the two queues) whose entry is a plain value is repaired by the
//     next read-write open: the plain value is deleted, the bucket made anew
//     and the indexes rebuilt from the records (records are the truth), in
//     one transaction, audited (AuditIndexRepair) and logged. ADD, DEL and
//     every other verb then serve at once. What the old bucket held is not
//     read (a plain value cannot be opened as a bucket): the audit entries
//     and exhaustion counters in it are lost, its pages stay in the file,
//     unreachable, until a rebuild compacts it (`hostlease-gc rebuild`).
//   - Anything else (the meta or allocs entry a plain value, a bucket whose
//     root page is outside the file, a meta or freelist or free page, another
//     bucket's root or a page whose header names another number, an inline
//     bucket that cannot be read) is damage at open
//     (ErrUnreadable): such a bucket cannot be deleted without bbolt freeing
//     the pages it wrongly points to, which may be another bucket's. The
//     daemon sets the store aside and rebuilds it from the runtime and the
//     records that still read (gc.RebuildStore); ADD answers CNI 11, DEL
//     exits 0 and releases nothing until then.
//   - A read-only open refuses what no open repairs (ErrUnreadable) and
//     reads a derived bucket turned plain value as a missing one (the
//     plugin's CHECK and STATUS serve). Whoever reports a store's health
//     (the CLI's status, list and rebuild, the daemon's sweep) asks
//     RootDamage, which reports both as ErrUnreadable: status shows it, the
//     daemon sets the store aside and rebuilds it, `rebuild` repairs it
//     without --force. LockedFile.Store, the rebuild's own view, refuses
//     neither and leaves the verdict to RootDamage.

// rootBuckets are the buckets a store of this schema may have.
var rootBuckets = [][]byte{bucketMeta, bucketAllocs, bucketTaken, bucketOwners, bucketExhaustion,
	bucketAudit, bucketImported, bucketPods, bucketAuditQueue, bucketPodDrops}

// rootFault is one damaged entry of the root page.
type rootFault struct {
	name string
	what string
	// plain: the entry is a plain value; repairable in place for a derived
	// bucket.
	plain bool
}

func (f rootFault) String() string { return "root entry " + strconv.Quote(f.name) + " " + f.what }

// repairable reports whether the next read-write open repairs f in place.
func (f rootFault) repairable() bool {
	return f.plain && f.name != string(bucketMeta) && f.name != string(bucketAllocs)
}

// rootFaults checks the root page's entry of every bucket the store has.
// It reads each bucket's root page header (in a read-write open, where bbolt
// knows the free pages; elsewhere the root page itself, through bbolt's own
// page checks) and walks nothing else.
func rootFaults(btx *bolt.Tx, f *os.File) []rootFault {
	var faults []rootFault
	pageSize := int64(btx.DB().Info().PageSize)
	pages := btx.Size() / pageSize
	roots := map[uint64]string{}
	c := btx.Cursor()
	for _, name := range rootBuckets {
		if k, _ := c.Seek(name); !bytes.Equal(k, name) {
			continue // missing: init restores a derived one; checkSchema judges meta and allocs
		}
		b := btx.Bucket(name)
		if b == nil {
			faults = append(faults, rootFault{name: string(name), what: "is a plain value, not a bucket (its bucket flag is clear)", plain: true})
			continue
		}
		if what := bucketRootFault(btx, f, b, pages, roots, string(name)); what != "" {
			faults = append(faults, rootFault{name: string(name), what: what})
		}
	}
	return faults
}

// bucketRootFault says what is wrong with b's root, "" when nothing is.
// roots collects the root pages seen so far (two buckets never share one).
// The root page's header is read from the file f (its number and type), and
// bbolt says whether it is free where it knows (a read-write open). A root
// page whose own type is damaged is the page's damage, not the entry's: it
// is left to the transactions that read it (ErrPageDamaged), as are a
// bucket's other pages.
func bucketRootFault(btx *bolt.Tx, f *os.File, b *bolt.Bucket, pages int64, roots map[uint64]string, name string) (what string) {
	defer func() {
		if r := recover(); r != nil {
			what = fmt.Sprintf("cannot be read: %v", r)
		}
	}()
	root := uint64(b.Root())
	if root == 0 {
		readRoot(b) // an inline bucket: its page is in the entry itself
		return ""
	}
	if root < 2 || int64(root) >= pages {
		return fmt.Sprintf("has root page %d, outside the file's data pages 2..%d", root, pages-1)
	}
	if other, ok := roots[root]; ok {
		return fmt.Sprintf("has root page %d, the root of bucket %q too", root, other)
	}
	roots[root] = name
	if info, err := btx.Page(int(root)); err == nil && info != nil {
		switch info.Type {
		case "free", "meta", "freelist":
			return fmt.Sprintf("has root page %d, a %s page", root, info.Type)
		}
	}
	if f == nil {
		return ""
	}
	var hdr [16]byte
	if _, err := f.ReadAt(hdr[:], int64(root)*int64(btx.DB().Info().PageSize)); err != nil {
		return "" // the environment, not the entry: the transactions that read it say
	}
	id, flags := binary.LittleEndian.Uint64(hdr[0:]), binary.LittleEndian.Uint16(hdr[8:])
	switch {
	case id != root:
		return fmt.Sprintf("has root page %d, whose header names page %d", root, id)
	case flags == pageMeta || flags == pageFreelist:
		return fmt.Sprintf("has root page %d, a page of flags %#x (meta or freelist)", root, flags)
	}
	// Any other type is the page's own damage, not the entry's: the
	// transactions that read the page meet it (ErrPageDamaged).
	return ""
}

// bbolt's page flags of a meta and of a freelist page.
const (
	pageMeta     = 0x04
	pageFreelist = 0x10
)

// readRoot reads b's root page through bbolt's checks of a page it searches
// (its number; a type neither leaf nor branch panics), descending to one
// leaf.
func readRoot(b *bolt.Bucket) { b.Cursor().Seek(nil) }

// rootError is the error of faults that no open repairs in place (all of
// them with strict), nil when there are none.
func rootError(path string, faults []rootFault, strict bool) error {
	var bad []string
	for _, f := range faults {
		if strict || !f.repairable() {
			bad = append(bad, f.String())
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrUnreadable, path, strings.Join(bad, "; "))
}

// RootDamage reports the damage rootFaults finds in the store's root page,
// as ErrUnreadable (nil when there is none): what a rebuild's view of a
// store (LockedFile.Store) does not refuse but must repair.
func (s *Store) RootDamage() error {
	var err error
	if verr := s.View(func(tx *Tx) error {
		err = rootError(s.path, rootFaults(tx.btx, s.file), true)
		return nil
	}); verr != nil {
		return verr
	}
	return err
}

// repairRoots deletes the plain values standing where derived buckets
// should be (the caller creates them again and rebuilds the indexes), and
// audits what was lost. It returns what it repaired.
func repairRoots(btx *bolt.Tx, faults []rootFault) ([]string, error) {
	var done []string
	c := btx.Cursor()
	for _, f := range faults {
		if !f.repairable() {
			continue
		}
		if k, _ := c.Seek([]byte(f.name)); !bytes.Equal(k, []byte(f.name)) {
			continue
		}
		if err := c.Delete(); err != nil {
			return done, err
		}
		done = append(done, f.name)
	}
	return done, nil
}

// auditRootRepair records a repair of repairRoots in the (new) audit log.
func (tx *Tx) auditRootRepair(names []string, now time.Time) error {
	if len(names) == 0 {
		return nil
	}
	why := fmt.Sprintf("root entries %s were plain values, not buckets (damage): made anew, the indexes rebuilt from the records; "+
		"what they held is lost (audit entries, exhaustion counters) and their pages stay unreachable until `hostlease-gc rebuild`",
		strings.Join(names, ", "))
	return tx.Audit(allocator.AuditEvent{Time: now, Action: allocator.AuditIndexRepair, Reason: why, By: "hostlease"})
}
