package faultinject

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// class says what the damage leaves behind, and so what may be expected.
type class int

const (
	// classLogical: the file is still a bbolt store with every bucket; only
	// values or index entries are wrong. It is never set aside, and every
	// verb serves at once.
	classLogical class = iota
	// classStore: the file may no longer be a usable store (pages, meta
	// pages, the schema). ADD may refuse (CNI 11 or 5) until the store is
	// repaired, but if an ADD succeeded its address must survive whatever
	// the daemon does next.
	classStore
)

func (c class) String() string { return [...]string{"logical", "store"}[c] }

// damage is one way to hurt a store.
type damage struct {
	name  string
	class class
	// sweepFirst: the damage forgets committed state that only the runtime
	// can restore (a rolled-back meta page), so the daemon sweeps before any
	// ADD is asked to avoid the forgotten addresses.
	sweepFirst bool
	// silentLoss: records vanish without a trace (the store still reads,
	// fewer of them); only the runtime can say which addresses READY
	// sandboxes use, so NOTREADY sandboxes' addresses are not required back.
	silentLoss bool
	// root: the damage is in the root page's entries (rootdamage_test.go):
	// status must show it and rebuild repair it before anything else runs.
	root  bool
	apply func(c *dcase) error
}

// dcase is one damage applied to one node.
type dcase struct {
	*node
	rng *rand.Rand
	// target is the owner whose record or index entry was damaged, if any.
	target *owner
	// keepTarget: the target stays live (its sandbox keeps running) instead
	// of being deleted in the plugin phase.
	keepTarget bool
	// alsoDelete is another owner the plugin phase deletes (one whose index
	// entry was made to name the target's address).
	alsoDelete *owner
	what       string // what exactly was done, for messages
}

// update runs fn in a bbolt read-write transaction on the node's store.
func (c *dcase) update(fn func(tx *bolt.Tx) error) error {
	db, err := bolt.Open(c.path(), 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	if err := db.Update(fn); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}

func bucket(tx *bolt.Tx, name string) (*bolt.Bucket, error) {
	b := tx.Bucket([]byte(name))
	if b == nil {
		return nil, fmt.Errorf("no bucket %s", name)
	}
	return b, nil
}

// pickOwner chooses a live or dead owner at random (never the last ADD's).
func (c *dcase) pickOwner(roles ...role) *owner {
	var cands []*owner
	for _, r := range roles {
		cands = append(cands, c.m.byRole(r)...)
	}
	return cands[c.rng.IntN(len(cands))]
}

func (c *dcase) randBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(c.rng.UintN(256))
	}
	return b
}

// recordDamage damages the target's record value with op, given its field
// spans, and books the result in the model: a value that no longer decodes
// (or names another address) is quarantined: reserved, and to be shown.
func (c *dcase) recordDamage(op func(v []byte, spans []span) []byte) error {
	c.target = c.pickOwner(roleReady, roleNotReady, roleDead)
	c.keepTarget = c.target.Role != roleDead && c.rng.IntN(2) == 0
	key := addrKey(c.target.IP)
	var after []byte
	err := c.update(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketAllocs)
		if err != nil {
			return err
		}
		v := bytes.Clone(b.Get(key))
		_, spans, err := parseRecord(v)
		if err != nil {
			return fmt.Errorf("golden record %s: %v", c.target.IP, err)
		}
		after = op(v, spans)
		return b.Put(key, after)
	})
	if err != nil {
		return err
	}
	r, _, perr := parseRecord(after)
	switch {
	case perr != nil || r.IP != c.target.IP:
		c.m.quarantined[c.target.IP] = true
		c.target.Intact = false
		if perr == nil {
			perr = fmt.Errorf("record names %s", r.IP)
		}
		c.what += fmt.Sprintf("; record %s no longer decodes (%v)", c.target.IP, perr)
	case r.ContainerID != c.target.ID || r.IfName != "eth0":
		// The record now claims another owner: nothing can tell it from a
		// real one, so its sandbox is torn down (DEL) rather than kept.
		c.target.Intact = false
		c.keepTarget = false
		c.what += fmt.Sprintf("; record %s now decodes as owner %q/%q", c.target.IP, shortName(r.ContainerID), r.IfName)
	default:
		c.what += fmt.Sprintf("; record %s still decodes with the same owner", c.target.IP)
	}
	return nil
}

func fieldSpan(spans []span, name string) span {
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	panic("no field " + name)
}

// recordFieldDamages: for every field of a record, one damage chosen by the
// seed: cut the value inside the field, scramble the field, flip one bit of
// it, or (strings) give it a length past the end of the value.
func recordFieldDamages(rng *rand.Rand) []damage {
	var out []damage
	for i, name := range fieldNames {
		ops := []string{"truncate", "scramble", "flip"}
		if fieldKinds[i] == 's' {
			ops = append(ops, "overlong")
		}
		op := ops[rng.IntN(len(ops))]
		out = append(out, damage{name: "record/" + name + "/" + op, class: classLogical, apply: func(c *dcase) error {
			return c.recordDamage(func(v []byte, spans []span) []byte {
				s := fieldSpan(spans, name)
				c.what = fmt.Sprintf("%s field %s [%d,%d) of %d bytes", op, name, s.Start, s.End, len(v))
				switch op {
				case "truncate":
					return v[:s.Start+c.rng.IntN(s.End-s.Start)]
				case "scramble":
					copy(v[s.Start:s.End], c.randBytes(s.End-s.Start))
				case "flip":
					v[s.Start+c.rng.IntN(s.End-s.Start)] ^= 1 << c.rng.IntN(8)
				case "overlong":
					return slices.Concat(v[:s.Start], binary.AppendUvarint(nil, uint64(len(v)+1000)), v[s.Data:])
				}
				return v
			})
		}})
	}
	return out
}

// recordValueDamages hurt a record value as a whole.
func recordValueDamages() []damage {
	mk := func(name string, op func(c *dcase, v []byte) []byte) damage {
		return damage{name: "record/" + name, class: classLogical, apply: func(c *dcase) error {
			c.what = name
			return c.recordDamage(func(v []byte, _ []span) []byte { return op(c, v) })
		}}
	}
	return []damage{
		mk("codec-byte-0", func(_ *dcase, v []byte) []byte { v[0] = 0; return v }),
		mk("codec-byte-1", func(_ *dcase, v []byte) []byte { v[0] = 1; return v }),
		mk("codec-byte-newer", func(_ *dcase, v []byte) []byte { v[0] = 3; return v }),
		mk("codec-byte-json", func(_ *dcase, v []byte) []byte { v[0] = '{'; return v }),
		mk("trailing-garbage", func(c *dcase, v []byte) []byte { return append(v, c.randBytes(1+c.rng.IntN(8))...) }),
		mk("empty", func(*dcase, []byte) []byte { return []byte{} }),
		mk("random-bytes", func(c *dcase, v []byte) []byte { return c.randBytes(len(v)) }),
		mk("json-garbage", func(*dcase, []byte) []byte { return []byte(`{"v":1,"ip":"not an address"}`) }),
	}
}

// prevAddr is the address before a.
func prevAddr(a netip.Addr) netip.Addr { return a.Prev() }

func setBit(bm []byte, base, ip netip.Addr, on bool) {
	i := int(ip.As4()[2]-base.As4()[2])*256 + int(ip.As4()[3]-base.As4()[3])
	if on {
		bm[i/8] |= 1 << (i % 8)
	} else {
		bm[i/8] &^= 1 << (i % 8)
	}
}

// takenBlock returns the key and a copy of the taken bitmap block of the pool.
func takenBlock(tx *bolt.Tx) (*bolt.Bucket, []byte, []byte, error) {
	b, err := bucket(tx, bucketTaken)
	if err != nil {
		return nil, nil, nil, err
	}
	k := addrKey(netip.MustParseAddr("10.66.0.0"))
	v := b.Get(k)
	if len(v) != 512 {
		return nil, nil, nil, fmt.Errorf("taken block %x: %d bytes", k, len(v))
	}
	return b, k, bytes.Clone(v), nil
}

func setLastReserved(tx *bolt.Tx, v []byte) error {
	b, err := bucket(tx, bucketMeta)
	if err != nil {
		return err
	}
	return b.Put([]byte("last_reserved.0"), v)
}

// indexDamages hurt the derived indexes: the taken bitmap and the owner index.
func indexDamages() []damage {
	base := netip.MustParseAddr("10.66.0.0")
	return []damage{
		{name: "takenbits/clear-held-bit", class: classLogical, apply: func(c *dcase) error {
			// The next ADD's round-robin lands right on the cleared address.
			c.target = c.pickOwner(roleReady, roleNotReady)
			c.keepTarget = true
			c.what = fmt.Sprintf("bit of %s cleared, last_reserved at %s", c.target.IP, prevAddr(c.target.IP))
			return c.update(func(tx *bolt.Tx) error {
				b, k, v, err := takenBlock(tx)
				if err != nil {
					return err
				}
				setBit(v, base, c.target.IP, false)
				if err := b.Put(k, v); err != nil {
					return err
				}
				return setLastReserved(tx, addrKey(prevAddr(c.target.IP)))
			})
		}},
		{name: "takenbits/zero-block", class: classLogical, apply: func(c *dcase) error {
			c.what = "taken block zeroed, last_reserved at the range end (the next ADD starts at the range start)"
			return c.update(func(tx *bolt.Tx) error {
				b, k, _, err := takenBlock(tx)
				if err != nil {
					return err
				}
				if err := b.Put(k, make([]byte, 512)); err != nil {
					return err
				}
				return setLastReserved(tx, addrKey(rangeEnd))
			})
		}},
		{name: "takenbits/delete-block", class: classLogical, apply: func(c *dcase) error {
			c.what = "taken block deleted, last_reserved at the range end"
			return c.update(func(tx *bolt.Tx) error {
				b, k, _, err := takenBlock(tx)
				if err != nil {
					return err
				}
				if err := b.Delete(k); err != nil {
					return err
				}
				return setLastReserved(tx, addrKey(rangeEnd))
			})
		}},
		{name: "takenbits/short-block", class: classLogical, apply: func(c *dcase) error {
			c.what = "taken block cut to 10 bytes"
			return c.update(func(tx *bolt.Tx) error {
				b, k, v, err := takenBlock(tx)
				if err != nil {
					return err
				}
				return b.Put(k, v[:10])
			})
		}},
		{name: "takenbits/set-free-bits", class: classLogical, apply: func(c *dcase) error {
			c.what = "bits set for the next 3 free addresses"
			return c.update(func(tx *bolt.Tx) error {
				b, k, v, err := takenBlock(tx)
				if err != nil {
					return err
				}
				held := c.m.held()
				n := 0
				for ip := rangeStart; n < 3 && inPool(ip); ip = ip.Next() {
					if _, ok := held[ip]; !ok && c.m.ownerOf(ip) == nil {
						setBit(v, base, ip, true)
						n++
					}
				}
				return b.Put(k, v)
			})
		}},
		{name: "takenbits/delete-bucket", class: classLogical, apply: func(c *dcase) error {
			c.what = "takenbits bucket deleted"
			return c.update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(bucketTaken)) })
		}},
		{name: "ownerhash/remove-entry", class: classLogical, apply: func(c *dcase) error {
			c.target = c.pickOwner(roleReady, roleNotReady, roleDead)
			c.what = fmt.Sprintf("owner entry of %s removed", shortName(c.target.ID))
			return c.update(func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketOwners)
				if err != nil {
					return err
				}
				return b.Delete(append(ownerPrefix(c.target.ID, "eth0"), addrKey(c.target.IP)...))
			})
		}},
		{name: "ownerhash/extra-entry-to-other-owner", class: classLogical, apply: func(c *dcase) error {
			c.target = c.pickOwner(roleReady, roleNotReady, roleDead)
			other := c.otherLive(c.target)
			c.what = fmt.Sprintf("owner entry %s -> %s (held by %s) added", shortName(c.target.ID), other.IP, shortName(other.ID))
			return c.update(func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketOwners)
				if err != nil {
					return err
				}
				return b.Put(append(ownerPrefix(c.target.ID, "eth0"), addrKey(other.IP)...), nil)
			})
		}},
		{name: "ownerhash/entry-moved-to-other-owner", class: classLogical, apply: func(c *dcase) error {
			c.target = c.pickOwner(roleReady, roleNotReady, roleDead)
			other := c.otherLive(c.target)
			c.what = fmt.Sprintf("owner entry of %s now points at %s (held by %s)", shortName(c.target.ID), other.IP, shortName(other.ID))
			return c.update(func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketOwners)
				if err != nil {
					return err
				}
				prefix := ownerPrefix(c.target.ID, "eth0")
				if err := b.Delete(append(bytes.Clone(prefix), addrKey(c.target.IP)...)); err != nil {
					return err
				}
				return b.Put(append(prefix, addrKey(other.IP)...), nil)
			})
		}},
		{name: "ownerhash/other-owner-entry-to-target", class: classLogical, apply: func(c *dcase) error {
			// Another (live) owner's hash now also names the target's address:
			// DEL of that owner must not free the target's.
			c.target = c.pickOwner(roleReady, roleNotReady)
			c.keepTarget = true
			other := c.otherLive(c.target)
			c.what = fmt.Sprintf("owner entry %s -> %s (held by %s) added; %s is deleted", shortName(other.ID), c.target.IP, shortName(c.target.ID), shortName(other.ID))
			c.alsoDelete = other
			return c.update(func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketOwners)
				if err != nil {
					return err
				}
				return b.Put(append(ownerPrefix(other.ID, "eth0"), addrKey(c.target.IP)...), nil)
			})
		}},
		{name: "ownerhash/garbage-keys", class: classLogical, apply: func(c *dcase) error {
			c.what = "undecodable owner keys added"
			return c.update(func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketOwners)
				if err != nil {
					return err
				}
				for _, k := range [][]byte{{1}, c.randBytes(8), append(c.randBytes(8), 9, 9), append(c.randBytes(8), 4, 10, 66)} {
					if err := b.Put(k, []byte("x")); err != nil {
						return err
					}
				}
				return nil
			})
		}},
		{name: "ownerhash/delete-bucket", class: classLogical, apply: func(c *dcase) error {
			c.what = "ownerhash bucket deleted"
			return c.update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(bucketOwners)) })
		}},
	}
}

// otherLive picks a live owner other than o.
func (c *dcase) otherLive(o *owner) *owner {
	for {
		p := c.pickOwner(roleReady, roleNotReady)
		if p != o {
			return p
		}
	}
}

// metaDamages hurt the meta bucket, the audit log and the exhaustion counters.
func metaDamages() []damage {
	put := func(bkt string, key []byte, val []byte) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b, err := bucket(tx, bkt)
			if err != nil {
				return err
			}
			if val == nil {
				return b.Delete(key)
			}
			return b.Put(key, val)
		}
	}
	mk := func(name string, cl class, what string, fn func(c *dcase) func(tx *bolt.Tx) error) damage {
		return damage{name: name, class: cl, apply: func(c *dcase) error {
			c.what = what
			return c.update(fn(c))
		}}
	}
	lit := func(bkt, key string, val []byte) func(*dcase) func(*bolt.Tx) error {
		return func(*dcase) func(*bolt.Tx) error { return put(bkt, []byte(key), val) }
	}
	firstAudit := func(op func(c *dcase, v []byte) []byte) func(*dcase) func(*bolt.Tx) error {
		return func(c *dcase) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error {
				// The newest entry: in the queue when it holds any.
				b := tx.Bucket([]byte(bucketAuditQueue))
				if b == nil || b.Stats().KeyN == 0 {
					var err error
					if b, err = bucket(tx, bucketAudit); err != nil {
						return err
					}
				}
				k, v := b.Cursor().Last()
				if k == nil {
					return errors.New("empty audit log")
				}
				return b.Put(bytes.Clone(k), op(c, bytes.Clone(v)))
			}
		}
	}
	return []damage{
		mk("meta/schema-deleted", classStore, "meta schema key deleted", lit(bucketMeta, "schema", nil)),
		mk("meta/schema-zero", classStore, "meta schema 0", lit(bucketMeta, "schema", []byte{0})),
		mk("meta/schema-two-bytes", classStore, "meta schema 2 bytes", lit(bucketMeta, "schema", []byte{2, 2})),
		mk("meta/network-renamed", classLogical, "meta network renamed", lit(bucketMeta, "network", []byte("another-net"))),
		mk("meta/network-deleted", classLogical, "meta network deleted", lit(bucketMeta, "network", nil)),
		mk("meta/ranges-garbage", classLogical, "meta ranges garbage", func(c *dcase) func(*bolt.Tx) error {
			return put(bucketMeta, []byte("ranges"), append([]byte{2}, c.randBytes(20)...))
		}),
		mk("meta/ranges-codec-byte", classLogical, "meta ranges format byte 7", func(*dcase) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketMeta)
				if err != nil {
					return err
				}
				v := bytes.Clone(b.Get([]byte("ranges")))
				v[0] = 7
				return b.Put([]byte("ranges"), v)
			}
		}),
		mk("meta/ranges-truncated", classLogical, "meta ranges cut in half", func(*dcase) func(*bolt.Tx) error {
			return func(tx *bolt.Tx) error {
				b, err := bucket(tx, bucketMeta)
				if err != nil {
					return err
				}
				v := bytes.Clone(b.Get([]byte("ranges")))
				return b.Put([]byte("ranges"), v[:len(v)/2])
			}
		}),
		mk("meta/ranges-deleted", classLogical, "meta ranges deleted", lit(bucketMeta, "ranges", nil)),
		mk("meta/last-reserved-garbage", classLogical, "last_reserved 3 bytes", lit(bucketMeta, "last_reserved.0", []byte{4, 1, 2})),
		mk("meta/last-reserved-outside", classLogical, "last_reserved outside every range", lit(bucketMeta, "last_reserved.0", addrKey(netip.MustParseAddr("192.0.2.200")))),
		mk("meta/last-reserved-v6", classLogical, "last_reserved an IPv6 address", lit(bucketMeta, "last_reserved.0", addrKey(netip.MustParseAddr("fd00::5")))),
		mk("meta/last-reserved-before-held", classLogical, "last_reserved just before a held address", func(c *dcase) func(*bolt.Tx) error {
			o := c.pickOwner(roleReady, roleNotReady)
			return put(bucketMeta, []byte("last_reserved.0"), addrKey(prevAddr(o.IP)))
		}),
		mk("audit/garbage-value", classLogical, "last audit entry random bytes", firstAudit(func(c *dcase, v []byte) []byte { return c.randBytes(len(v)) })),
		mk("audit/truncated", classLogical, "last audit entry cut", firstAudit(func(c *dcase, v []byte) []byte { return v[:len(v)/2] })),
		mk("audit/codec-byte", classLogical, "last audit entry format byte 9", firstAudit(func(c *dcase, v []byte) []byte { v[0] = 9; return v })),
		mk("audit/bad-key", classLogical, "audit entry with a 3-byte key", func(c *dcase) func(*bolt.Tx) error {
			return put(bucketAudit, []byte{1, 2, 3}, c.randBytes(12))
		}),
		mk("exhaustion/garbage-json", classLogical, "exhaustion counter of range set 0 not JSON", lit(bucketExhaustion, "0", []byte("{not json"))),
		mk("exhaustion/wrong-types", classLogical, "exhaustion counter with wrong JSON types", lit(bucketExhaustion, "0", []byte(`{"count":"many","last":5,"rangeSet":[]}`))),
		mk("exhaustion/bad-key", classLogical, "exhaustion counter under a non-numeric key", lit(bucketExhaustion, "zero", []byte(`{"count":3}`))),
	}
}

// pageDamages write bytes at page offsets of the file. What they hit is read
// from the file: the page size from the meta page, pages by walking the tree
// from the active meta page.
func pageDamages() []damage {
	pageOf := func(c *dcase, bucketName string, flags uint16, notRoot bool) (*fileLayout, pageRef, error) {
		l, err := walkFile(c.path())
		if err != nil {
			return nil, pageRef{}, err
		}
		var cands []pageRef
		for i, p := range l.Pages {
			if p.Bucket == bucketName && p.Flags == flags && (!notRoot || i > 0 && l.Pages[i-1].Bucket == bucketName) {
				cands = append(cands, p)
			}
		}
		if len(cands) == 0 {
			return nil, pageRef{}, fmt.Errorf("no %#x page in bucket %q (layout %+v)", flags, bucketName, l.Pages)
		}
		return l, cands[c.rng.IntN(len(cands))], nil
	}
	onPage := func(name, bkt string, flags uint16, notRoot bool, off int64, val func(c *dcase, p pageRef) []byte) damage {
		return damage{name: name, class: classStore, apply: func(c *dcase) error {
			l, p, err := pageOf(c, bkt, flags, notRoot)
			if err != nil {
				return err
			}
			v := val(c, p)
			c.what = fmt.Sprintf("page %d (bucket %q, flags %#x, count %d, page size %d): %d bytes at +%d = %x", p.ID, p.Bucket, p.Flags, p.Count, l.PageSize, len(v), off, v)
			return writeAt(c.path(), int64(p.ID)*int64(l.PageSize)+off, v)
		}}
	}
	zero16 := func(*dcase, pageRef) []byte { return []byte{0, 0} }
	count := func(delta int) func(*dcase, pageRef) []byte {
		return func(_ *dcase, p pageRef) []byte {
			return binary.LittleEndian.AppendUint16(nil, uint16(max(1, int(p.Count)+delta)))
		}
	}
	metaPage := func(name string, which func(l *fileLayout) []int, sweepFirst bool) damage {
		return damage{name: name, class: classStore, sweepFirst: sweepFirst, apply: func(c *dcase) error {
			l, err := walkFile(c.path())
			if err != nil {
				return err
			}
			for _, id := range which(l) {
				c.what += fmt.Sprintf("meta page %d zeroed (active %d); ", id, l.ActiveMeta)
				if err := writeAt(c.path(), int64(id*l.PageSize), make([]byte, l.PageSize)); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	return []damage{
		onPage("page/allocs-leaf-type-zeroed", bucketAllocs, flagLeaf, true, 8, zero16),
		onPage("page/allocs-branch-type-zeroed", bucketAllocs, flagBranch, false, 8, zero16),
		onPage("page/allocs-leaf-count-up", bucketAllocs, flagLeaf, true, 10, count(+40)),
		silent(onPage("page/allocs-leaf-count-down", bucketAllocs, flagLeaf, true, 10, count(-3))),
		onPage("page/allocs-branch-count-scrambled", bucketAllocs, flagBranch, false, 10, func(c *dcase, _ pageRef) []byte { return c.randBytes(2) }),
		onPage("page/root-leaf-type-zeroed", "", flagLeaf, false, 8, zero16),
		onPage("page/allocs-leaf-body-scrambled", bucketAllocs, flagLeaf, true, 16, func(c *dcase, _ pageRef) []byte { return c.randBytes(64) }),
		{name: "page/freelist-type-zeroed", class: classStore, apply: func(c *dcase) error {
			l, err := walkFile(c.path())
			if err != nil {
				return err
			}
			c.what = fmt.Sprintf("freelist page %d type zeroed", l.Freelist)
			return writeAt(c.path(), int64(l.Freelist)*int64(l.PageSize)+8, []byte{0, 0})
		}},
		metaPage("meta/both-meta-pages-zeroed", func(*fileLayout) []int { return []int{0, 1} }, false),
		silent(metaPage("meta/active-meta-page-zeroed", func(l *fileLayout) []int { return []int{l.ActiveMeta} }, true)),
		metaPage("meta/stale-meta-page-zeroed", func(l *fileLayout) []int { return []int{1 - l.ActiveMeta} }, false),
	}
}

func silent(d damage) damage {
	d.silentLoss = true
	return d
}

// allDamages is the catalogue for one seed.
func allDamages(rng *rand.Rand) []damage {
	out := []damage{{name: "control/no-damage", class: classLogical, apply: func(c *dcase) error { c.what = "nothing"; return nil }}}
	out = append(out, recordFieldDamages(rng)...)
	out = append(out, recordValueDamages()...)
	out = append(out, indexDamages()...)
	out = append(out, metaDamages()...)
	out = append(out, pageDamages()...)
	out = append(out, rootDamages()...)
	return out
}
