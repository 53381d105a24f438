package faultinject

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The root page's entries: one leaf element per bucket, whose bucket flag
// says "a bucket" and whose value is the bucket's header (root page number,
// sequence; an inline bucket's page follows a root of 0). These damages write
// bytes there, as a flipped bit or a bad restore would. Each case must show
// the damage to an operator before anything touched the store (status), be
// repaired by `rebuild` without --force, and keep the model's promises
// (DEL exits 0, no address twice) while the plugin and the daemon work on it.

// allRootBuckets are the buckets a store has (the two queues are created on
// first use: rootEntry makes them when a case needs them).
var allRootBuckets = []string{bucketMeta, bucketAllocs, bucketTaken, bucketOwners, bucketExhaustion,
	bucketAudit, "imported", "poduid", bucketAuditQueue, "poddrop"}

// derivedBucket: repaired in place by the next read-write open when its
// entry becomes a plain value (the plugin serves at once).
func derivedBucket(name string) bool { return name != bucketMeta && name != bucketAllocs }

// rootEntryAt is one element of the root page as found in the file.
type rootEntryAt struct {
	elemOff int64  // the element header's offset in the file (flags first)
	valOff  int64  // the value's offset in the file (the bucket header)
	flags   uint32 // the element's flags
	val     []byte
}

// rootEntry finds bucket name's entry in the root page (a single leaf: a
// store's root holds ten entries at most).
func rootEntry(path, name string) (*fileLayout, rootEntryAt, error) {
	l, err := walkFile(path)
	if err != nil {
		return nil, rootEntryAt{}, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, rootEntryAt{}, err
	}
	rootID := l.Pages[0].ID
	p := data[int(rootID)*l.PageSize:]
	if le16(p[8:]) != flagLeaf {
		return nil, rootEntryAt{}, fmt.Errorf("root page %d is not a leaf (flags %#x)", rootID, le16(p[8:]))
	}
	for i := range int(le16(p[10:])) {
		eo := pageHeaderSize + i*elementSize
		e := p[eo:]
		pos, ks, vs := int(le32(e[4:])), int(le32(e[8:])), int(le32(e[12:]))
		if string(e[pos:pos+ks]) != name {
			continue
		}
		base := int64(rootID) * int64(l.PageSize)
		return l, rootEntryAt{elemOff: base + int64(eo), valOff: base + int64(eo+pos+ks), flags: le32(e), val: e[pos+ks : pos+ks+vs]}, nil
	}
	return nil, rootEntryAt{}, fmt.Errorf("no root entry %q", name)
}

// ensureBucket makes name exist with one entry (the queues are created on
// first use; a golden store may not have them yet).
func (c *dcase) ensureBucket(name string) error {
	return c.update(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte(name)) != nil {
			return nil
		}
		b, err := tx.CreateBucket([]byte(name))
		if err != nil {
			return err
		}
		if name == bucketAuditQueue {
			return nil // an empty queue: a real entry's format is the store's
		}
		return b.Put([]byte("damage-fixture-entry"), []byte{1})
	})
}

// rootDamages hurt the root page's entries.
func rootDamages() []damage {
	onEntry := func(name, kind string, cl class, fn func(c *dcase, l *fileLayout, e rootEntryAt) error) damage {
		return damage{name: "root/" + name + "-" + kind, class: cl, root: true, apply: func(c *dcase) error {
			if err := c.ensureBucket(name); err != nil {
				return err
			}
			l, e, err := rootEntry(c.path(), name)
			if err != nil {
				return err
			}
			return fn(c, l, e)
		}}
	}
	setRoot := func(what func(c *dcase, l *fileLayout, e rootEntryAt) (uint64, string)) func(c *dcase, l *fileLayout, e rootEntryAt) error {
		return func(c *dcase, l *fileLayout, e rootEntryAt) error {
			id, why := what(c, l, e)
			c.what = fmt.Sprintf("bucket header root page %d -> %d (%s)", le64(e.val), id, why)
			return writeAt(c.path(), e.valOff, binary.LittleEndian.AppendUint64(nil, id))
		}
	}
	beyond := setRoot(func(c *dcase, l *fileLayout, _ rootEntryAt) (uint64, string) {
		fi, _ := os.Stat(c.path())
		return uint64(fi.Size()/int64(l.PageSize)) + 1000, "beyond the file"
	})
	var out []damage
	for _, name := range allRootBuckets {
		cl := classStore
		if derivedBucket(name) {
			cl = classLogical // repaired by the plugin's next open
		}
		out = append(out, onEntry(name, "flag-cleared", cl, func(c *dcase, _ *fileLayout, e rootEntryAt) error {
			c.what = fmt.Sprintf("root entry %q: bucket flag cleared (flags %#x -> %#x)", name, e.flags, e.flags&^leafBucketFlag)
			return writeAt(c.path(), e.elemOff, binary.LittleEndian.AppendUint32(nil, e.flags&^leafBucketFlag))
		}))
		out = append(out, onEntry(name, "root-beyond-file", classStore, beyond))
	}
	out = append(out,
		onEntry(bucketTaken, "root-freelist-page", classStore, setRoot(func(_ *dcase, l *fileLayout, _ rootEntryAt) (uint64, string) {
			return l.Freelist, "the freelist page"
		})),
		onEntry(bucketMeta, "root-meta-page", classStore, setRoot(func(*dcase, *fileLayout, rootEntryAt) (uint64, string) {
			return 1, "meta page 1"
		})),
		onEntry(bucketOwners, "root-allocs-root", classStore, setRoot(func(c *dcase, _ *fileLayout, _ rootEntryAt) (uint64, string) {
			_, a, err := rootEntry(c.path(), bucketAllocs)
			if err != nil {
				return 0, err.Error()
			}
			return le64(a.val), "allocs' root page"
		})),
		onEntry(bucketAuditQueue, "inline-page-flags-zeroed", classStore, func(c *dcase, _ *fileLayout, e rootEntryAt) error {
			if le64(e.val) != 0 {
				return fmt.Errorf("auditq is not inline (root %d)", le64(e.val))
			}
			c.what = "auditq's inline page: flags zeroed"
			return writeAt(c.path(), e.valOff+16+8, []byte{0, 0})
		}),
	)
	return out
}

// rootCheck: before anything else touches the damaged store, status shows
// the damage, and `rebuild` (without --force) repairs a copy of it: the
// rebuilt copy serves status cleanly and holds every live owner's address.
func (r *run) rootCheck() {
	status := runCLI(r.t, "status", "--data-dir", r.dataDir)
	if status.Code == 0 || !damageWords.MatchString(status.Stdout+status.Stderr) {
		r.t.Errorf("root damage (%s): want status to exit non-zero and show the damage:\n%s", r.what, status)
	}
	side := filepath.Join(r.t.TempDir(), "copy")
	if err := os.Mkdir(side, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := copyFile(r.path(), filepath.Join(side, filepath.Base(r.path()))); err != nil {
		r.t.Fatal(err)
	}
	res := runCLI(r.t, "rebuild", "--network", network, "--data-dir", side, "--cri-endpoint", r.cri.Endpoint())
	if res.Code != 0 {
		r.t.Errorf("root damage (%s): rebuild without --force did not repair it:\n%s", r.what, res)
		return
	}
	if st := runCLI(r.t, "status", "--data-dir", side); st.Code != 0 {
		r.t.Errorf("root damage (%s): status after the rebuild:\n%s", r.what, st)
	}
	v, err := readView(filepath.Join(side, filepath.Base(r.path())))
	if err != nil {
		r.t.Errorf("root damage (%s): the rebuilt store does not read: %v", r.what, err)
		return
	}
	for _, o := range r.liveOwners() {
		if !v.Keys[o.IP] {
			r.t.Errorf("root damage (%s): the rebuild lost %s of %s owner %s", r.what, o.IP, o.Role, shortName(o.ID))
		}
	}
	if strings.Contains(res.Stdout, "healthy") {
		r.t.Errorf("root damage (%s): rebuild called the store healthy:\n%s", r.what, res)
	}
}
