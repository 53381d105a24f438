package gcintegration

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Stores as earlier versions of the layout left them.

// asBeforeTheAuditQueue rewrites the store at path as versions before the
// audit queue wrote it: every audit entry in the audit bucket under its
// sequence, the bucket's sequence its last, no auditq bucket.
func asBeforeTheAuditQueue(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		q, audit := tx.Bucket([]byte("auditq")), tx.Bucket([]byte("audit"))
		if q == nil {
			return nil
		}
		if err := q.ForEach(func(k, v []byte) error { return audit.Put(k, v) }); err != nil {
			return err
		}
		if k, _ := audit.Cursor().Last(); len(k) == 8 {
			if err := audit.SetSequence(binary.BigEndian.Uint64(k)); err != nil {
				return err
			}
		}
		return tx.DeleteBucket([]byte("auditq"))
	}); err != nil {
		t.Fatal(err)
	}
}

// gcConfKeeping is the network's config for a CNI GC that keeps the
// attachments (id, eth0) of ids.
func (n *node) gcConfKeeping(t *testing.T, ids ...string) []byte {
	t.Helper()
	var conf map[string]any
	if err := json.Unmarshal(n.conf, &conf); err != nil {
		t.Fatal(err)
	}
	var valid []map[string]string
	for _, id := range ids {
		valid = append(valid, map[string]string{"containerID": id, "ifname": "eth0"})
	}
	conf["cniVersion"] = "1.1.0" // GC is a CNI 1.1 verb
	conf["cni.dev/valid-attachments"] = valid
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A store as versions before the audit queue wrote it (every audit entry in
// the audit bucket, no auditq bucket) is served as it is: the plugin's ADD,
// CHECK, DEL and GC and hostlease-gc list, status, audit and rebuild work on
// it, and the audit log goes on after its entries.
func TestStoreWithoutAuditQueue(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	ipA := n.add("a")
	n.add("b")
	n.add("c")
	if o := n.del("c"); !o.OK() {
		t.Fatalf("DEL c: %s", o)
	}
	asBeforeTheAuditQueue(t, n.storePath())
	audited := func() []string {
		var out []string
		for _, ev := range n.audit() {
			out = append(out, ev.Action+" "+ev.ContainerID)
		}
		return out
	}
	eq := func(what string, got, want any) {
		t.Helper()
		b1, _ := json.Marshal(got)
		b2, _ := json.Marshal(want)
		if string(b1) != string(b2) {
			t.Errorf("%s: %s, want %s", what, b1, b2)
		}
	}
	eq("audit log of the older layout", audited(), []string{allocator.AuditRelease + " c"})

	ipD := n.add("d")
	if o := n.plugin("CHECK", "a", n.conf); !o.OK() {
		t.Errorf("CHECK a: %s", o)
	}
	if o := n.del("b"); !o.OK() {
		t.Errorf("DEL b: %s", o)
	}
	n.add("e")
	if o := n.plugin("GC", "gc", n.gcConfKeeping(t, "a", "d")); !o.OK() {
		t.Errorf("GC keeping a and d: %s", o)
	}
	recs := n.records()
	eq("records after ADD, CHECK, DEL and GC", slices.Sorted(maps.Keys(recs)), []string{"a", "d"})
	if recs["a"].IP != ipA || recs["d"].IP != ipD {
		t.Errorf("records %v, want a at %s and d at %s", recs, ipA, ipD)
	}
	if p := n.pool(); p.Size != "8" || p.Used != 2 {
		t.Errorf("status: %+v, want size 8, used 2", p)
	}
	eq("audit log after the older entries", audited(), []string{
		allocator.AuditRelease + " c", allocator.AuditRelease + " b", allocator.AuditGC + " e"})

	n.cri.Ready("a", ipA)
	n.cri.Ready("d", ipD)
	if _, errOut, code := gcCLI(t, "rebuild", "--force", "--data-dir", n.dataDir, "--network", network, "--cri-endpoint", n.cri.Endpoint()); code != 0 {
		t.Fatalf("hostlease-gc rebuild --force: exit %d: %s", code, errOut)
	}
	recs = n.records()
	eq("records after the rebuild", slices.Sorted(maps.Keys(recs)), []string{"a", "d"})
	if recs["a"].IP != ipA || recs["d"].IP != ipD {
		t.Errorf("rebuilt records %v, want a at %s and d at %s", recs, ipA, ipD)
	}
}
