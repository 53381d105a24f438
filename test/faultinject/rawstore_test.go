package faultinject

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The store's byte formats, written out here independently of pkg/allocator:
// the format is what the damage targets, and what the checks read back.
// This decoder is an intentional second implementation, an independent
// oracle: checks made through pkg/allocator's own codec could not see a bug
// that codec shares with the store. Do not replace it with pkg/allocator's.

// Bucket and key names of a schema 2 store.
const (
	bucketMeta       = "meta"
	bucketAllocs     = "allocs"
	bucketTaken      = "takenbits"
	bucketOwners     = "ownerhash"
	bucketExhaustion = "exhaustion"
	bucketAudit      = "audit"
	bucketAuditQueue = "auditq"
)

// addrKey is the store's address key: a family byte, then the address bytes.
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

// ownerPrefix is the ownerhash key prefix of an attachment: FNV-1a 64 of
// containerID \0 ifname, big endian.
func ownerPrefix(containerID, ifname string) []byte {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for _, c := range []byte(containerID + "\x00" + ifname) {
		h ^= uint64(c)
		h *= prime64
	}
	return binary.BigEndian.AppendUint64(nil, h)
}

// rec is a decoded record: the fields the checks need.
type rec struct {
	IP          netip.Addr
	ContainerID string
	IfName      string
	Netns       string
	State       string
}

// fieldNames are a binary record's fields in their stored order, after the
// format byte.
var fieldNames = []string{"ip", "prefixLen", "gateway", "rangeSet", "containerID", "ifName", "network",
	"podNamespace", "podName", "podUID", "netns", "state", "source", "created", "committed",
	"misses", "firstMissed", "verdict", "sandboxState"}

// fieldKinds says how each field is encoded: a address, v varint, s string.
var fieldKinds = "avavsssssssssvvvvss"

// witnessNames and witnessKinds are the fields a format 3 record (one with a
// netns witness) has after those: u unsigned varint. The inode is never 0,
// and the flags are 0 or 1 (the netns existed).
var (
	witnessNames = []string{"netnsDirDev", "netnsDirIno", "netnsFlags"}
	witnessKinds = "uuu"
)

// identityNames and identityKinds are the fields a format 4 record (a
// witness with its directory's file handle or its namespace's identity) has
// after the witness's. The handle and the namespace's inode are never both
// empty.
var (
	identityNames = []string{"netnsDirHandle", "netnsDev", "netnsIno"}
	identityKinds = "suu"
)

// span is one field's bytes within a value: [Start, End), and for a string
// where its length prefix ends (Data).
type span struct {
	Name             string
	Start, Data, End int
}

// parseRecord decodes a binary (format 2, 3 with a netns witness, or 4 with
// its identities) record
// and returns its field spans. It fails exactly where a strict decoder must:
// a short value, an unknown format or family byte, bytes left over, no
// address, or a witness with inode 0 or unknown flags.
func parseRecord(v []byte) (*rec, []span, error) {
	if len(v) == 0 {
		return nil, nil, errors.New("empty value")
	}
	if v[0] < 2 || v[0] > 4 {
		return nil, nil, fmt.Errorf("format byte %d", v[0])
	}
	p := 1
	var spans []span
	var addrs []netip.Addr
	var strs []string
	var uints []uint64
	names, kinds := fieldNames, fieldKinds
	if v[0] >= 3 {
		names, kinds = append(append([]string(nil), fieldNames...), witnessNames...), fieldKinds+witnessKinds
	}
	if v[0] == 4 {
		names, kinds = append(names, identityNames...), kinds+identityKinds
	}
	for i, kind := range kinds {
		sp := span{Name: names[i], Start: p}
		switch kind {
		case 'u':
			u, n := binary.Uvarint(v[p:])
			if n <= 0 {
				return nil, spans, fmt.Errorf("bad uvarint at %d", p)
			}
			uints = append(uints, u)
			p += n
		case 'a':
			if p >= len(v) {
				return nil, spans, errors.New("short")
			}
			size := map[byte]int{0: 1, 4: 5, 6: 17}[v[p]]
			if size == 0 || p+size > len(v) {
				return nil, spans, fmt.Errorf("bad address at %d", p)
			}
			a, _ := keyAddr(v[p : p+size])
			addrs = append(addrs, a)
			p += size
		case 'v':
			_, n := binary.Varint(v[p:])
			if n <= 0 {
				return nil, spans, fmt.Errorf("bad varint at %d", p)
			}
			p += n
		case 's':
			l, n := binary.Uvarint(v[p:])
			if n <= 0 || l > uint64(len(v)-p-n) {
				return nil, spans, fmt.Errorf("bad string at %d", p)
			}
			sp.Data = p + n
			strs = append(strs, string(v[p+n:p+n+int(l)]))
			p += n + int(l)
		}
		sp.End = p
		spans = append(spans, sp)
	}
	if p != len(v) {
		return nil, spans, fmt.Errorf("%d bytes left over", len(v)-p)
	}
	if !addrs[0].IsValid() {
		return nil, spans, errors.New("no address")
	}
	if len(uints) >= 3 && (uints[1] == 0 || uints[2] > 1) {
		return nil, spans, fmt.Errorf("bad netns witness %v", uints)
	}
	if len(uints) == 5 && strs[len(strs)-1] == "" && uints[4] == 0 {
		return nil, spans, errors.New("netns identity format naming neither a handle nor a namespace")
	}
	return &rec{IP: addrs[0], ContainerID: strs[0], IfName: strs[1], Netns: strs[6], State: strs[7]}, spans, nil
}

// storeView is what the raw reader saw of a store.
type storeView struct {
	// Keys are the addresses allocs has a value for, decodable or not.
	Keys map[netip.Addr]bool
	// Records are the values that decode and whose address is their key.
	Records map[netip.Addr]*rec
	// Bad are the addresses whose value does not decode, or names another address.
	Bad map[netip.Addr]string
}

// heldBy returns the addresses whose record names containerID.
func (v *storeView) heldBy(containerID string) []netip.Addr {
	var out []netip.Addr
	for ip, r := range v.Records {
		if r.ContainerID == containerID {
			out = append(out, ip)
		}
	}
	return out
}

// readView reads a store's allocs with raw bbolt (read-only, shared lock).
// It fails when bbolt cannot open or walk the file: a panic, and a fault from
// a page reference beyond the mapped file (a damaged bucket header or branch
// element), come back as errors instead of killing the test binary.
func readView(path string) (v *storeView, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("bbolt panicked reading %s: %v", path, r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	v = &storeView{Keys: map[netip.Addr]bool{}, Records: map[netip.Addr]*rec{}, Bad: map[netip.Addr]string{}}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucketAllocs))
		if b == nil {
			return errors.New("no allocs bucket")
		}
		return b.ForEach(func(k, val []byte) error {
			ip, ok := keyAddr(k)
			if !ok {
				return nil
			}
			v.Keys[ip] = true
			r, _, err := parseRecord(val)
			switch {
			case err != nil:
				v.Bad[ip] = err.Error()
			case r.IP != ip:
				v.Bad[ip] = fmt.Sprintf("record names %s", r.IP)
			default:
				v.Records[ip] = r
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// ---------------------------------------------------------------------------
// bbolt's page layout, for physical damage.
//
// A page starts with a 16-byte header: id u64, flags u16, count u16,
// overflow u32 (native byte order: little endian here). Pages 0 and 1 are
// the meta pages: after the header, magic u32, version u32, pageSize u32,
// flags u32, root bucket {root pgid u64, sequence u64}, freelist pgid u64,
// high-water pgid u64, txid u64, checksum u64. A branch page's elements are
// {pos u32, ksize u32, pgid u64}; a leaf's {flags u32, pos u32, ksize u32,
// vsize u32}, pos counting from the element itself; a leaf element with flag 1
// is a bucket whose value starts with {root pgid u64, sequence u64}, followed
// by an inline page when root is 0.

const (
	pageHeaderSize  = 16
	flagBranch      = 0x01
	flagLeaf        = 0x02
	leafBucketFlag  = 0x01
	elementSize     = 16
	metaTxidOffset  = pageHeaderSize + 4 + 4 + 4 + 4 + 16 + 8 + 8
	metaPageSizeOff = pageHeaderSize + 8
)

// pageRef is one page reachable from the active meta page.
type pageRef struct {
	ID     uint64
	Flags  uint16
	Count  uint16
	Bucket string // the bucket whose tree holds it ("" for the root bucket)
}

// fileLayout is what a walk of the file found.
type fileLayout struct {
	PageSize   int
	ActiveMeta int // 0 or 1: the meta page with the higher txid
	Freelist   uint64
	Pages      []pageRef
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// walkFile reads the page size from meta page 0 and walks every page
// reachable from the active meta page.
func walkFile(path string) (*fileLayout, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 2*4096 {
		return nil, fmt.Errorf("%s: %d bytes, too short", path, len(data))
	}
	ps := int(le32(data[metaPageSizeOff:]))
	if ps < 512 || ps > 1<<16 || len(data)%ps != 0 {
		return nil, fmt.Errorf("%s: page size %d", path, ps)
	}
	l := &fileLayout{PageSize: ps}
	if le64(data[ps+metaTxidOffset:]) > le64(data[metaTxidOffset:]) {
		l.ActiveMeta = 1
	}
	meta := data[l.ActiveMeta*ps:]
	root := le64(meta[pageHeaderSize+16:])
	l.Freelist = le64(meta[pageHeaderSize+32:])
	page := func(id uint64) ([]byte, error) {
		off := int(id) * ps
		if off+ps > len(data) {
			return nil, fmt.Errorf("page %d beyond the file", id)
		}
		return data[off:], nil
	}
	seen := map[uint64]bool{}
	var walk func(id uint64, bucket string, depth int) error
	var walkInline func(p []byte, bucket string, depth int) error
	leafBuckets := func(p []byte, depth int) error {
		n := int(le16(p[10:]))
		for i := range n {
			e := p[pageHeaderSize+i*elementSize:]
			if le32(e)&leafBucketFlag == 0 {
				continue
			}
			pos, ks, vs := int(le32(e[4:])), int(le32(e[8:])), int(le32(e[12:]))
			key := string(e[pos : pos+ks])
			val := e[pos+ks : pos+ks+vs]
			if r := le64(val); r != 0 {
				if err := walk(r, key, depth+1); err != nil {
					return err
				}
			} else if err := walkInline(val[16:], key, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	walkInline = func(p []byte, _ string, depth int) error {
		if le16(p[8:])&flagLeaf == 0 {
			return nil
		}
		return leafBuckets(p, depth)
	}
	walk = func(id uint64, bucket string, depth int) error {
		if seen[id] || depth > 32 {
			return fmt.Errorf("page %d reached twice", id)
		}
		seen[id] = true
		p, err := page(id)
		if err != nil {
			return err
		}
		flags, count := le16(p[8:]), le16(p[10:])
		l.Pages = append(l.Pages, pageRef{ID: id, Flags: flags, Count: count, Bucket: bucket})
		switch flags {
		case flagBranch:
			for i := range int(count) {
				e := p[pageHeaderSize+i*elementSize:]
				if err := walk(le64(e[8:]), bucket, depth+1); err != nil {
					return err
				}
			}
		case flagLeaf:
			return leafBuckets(p, depth)
		default:
			return fmt.Errorf("page %d has flags %#x", id, flags)
		}
		return nil
	}
	if err := walk(root, "", 0); err != nil {
		return nil, err
	}
	return l, nil
}

// writeAt overwrites bytes of the file at off (and syncs), as a disk or a
// person with dd would.
func writeAt(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
