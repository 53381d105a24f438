package store

// The file layout: bucket and key names, and how addresses and owners are
// encoded in keys. Only this package knows them.

import (
	"encoding/binary"
	"hash/fnv"
	"net/netip"
	"strconv"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Bucket layout of a store (one bbolt file per network):
//
//	meta        schema version, network name, range sets, last reserved per range set
//	allocs      addrKey(ip) -> Record                  (the source of truth; codec.go)
//	takenbits   block key -> bitmap of reserved addresses (what the address choice reads; bitmap.go)
//	ownerhash   ownerPrefix(attachment) + addrKey -> nil  (index for ADD/DEL/CHECK)
//	poduid      podPrefix(podUID) + addrKey -> nil for each record with a pod UID
//	            (index for ADD's release of the pod's dead sandboxes; pods.go),
//	            and for each key queued in poddrop
//	poddrop     poduid keys whose record was released -> 1: their deletes,
//	            deferred to when the queue is full, kept small enough to be
//	            inline in the root page (pods.go); absent from stores written
//	            before it, created by the first release that needs it
//	exhaustion  range set index -> JSON Exhaustion
//	audit       big-endian sequence -> AuditEvent (bounded to auditLimit; codec.go)
//	auditq      the same for the newest entries: a queue kept small enough
//	            to be inline in the root page, moved to audit when full
//	            (audit.go); absent from stores written before it, created by
//	            the first write of an audit entry
//	imported    addrKey(ip) -> nil for each record imported from host-local
//	            and still held (see ReleaseHostLocalGone)
//
// meta also keeps "records", the number of records in allocs (8 bytes, big
// endian), written in the same transaction as every record put or deleted: it
// is the count the derived indexes are checked against (see indexesAgree);
// "hostlocal_imported", when host-local's state was imported (or must never
// be); "audit_reported", the daemon's last reported audit sequence; and
// "hostlocal_export", the mark of the last export to host-local's files
// (meta.go), absent from stores never exported.
var (
	bucketMeta       = []byte("meta")
	bucketAllocs     = []byte("allocs")
	bucketTaken      = []byte("takenbits")
	bucketOwners     = []byte("ownerhash")
	bucketExhaustion = []byte("exhaustion")
	bucketAudit      = []byte("audit")
	bucketImported   = []byte("imported")
	bucketPods       = []byte("poduid")
	bucketAuditQueue = []byte("auditq")
	bucketPodDrops   = []byte("poddrop")

	keySchema  = []byte("schema")
	keyNetwork = []byte("network")
	keyRanges  = []byte("ranges")
	keyRecords = []byte("records")
)

// auditLimit bounds the audit log so a store never grows without bound; the
// oldest entries are dropped auditPrune at a time (see Tx.Audit).
const (
	auditLimit = 2048
	auditPrune = 64
)

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
// instead of four: one page less to fault, copy and write per ADD and DEL);
// Records compares each record's owner, so owners whose hashes collide are still told apart.
func ownerPrefix(a allocator.Attachment) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8+17), ownerHash(a))
}

// ownerHash is FNV-1a (64 bit) of containerID \0 ifname. A variable so that
// tests can make every owner collide.
var ownerHash = func(a allocator.Attachment) uint64 {
	h := fnv.New64a()
	h.Write([]byte(a.ContainerID))
	h.Write([]byte{0})
	h.Write([]byte(a.IfName))
	return h.Sum64()
}

// podPrefix is the pod index's key prefix for a pod UID: an 8-byte FNV-1a
// hash of the UID (Records compares each record's UID, so colliding UIDs
// are told apart); a key is the prefix followed by addrKey(ip).
func podPrefix(uid string) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8+17), podHash(uid))
}

// podHash is FNV-1a (64 bit) of a pod UID. A variable so that tests can make
// every UID collide.
var podHash = func(uid string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(uid))
	return h.Sum64()
}

func lastReservedKey(rangeSet int) []byte { return []byte("last_reserved." + strconv.Itoa(rangeSet)) }

var keyImported = []byte("hostlocal_imported")
