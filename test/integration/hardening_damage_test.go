package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Damaged stores: a record that does not decode, a cleared bitmap bit, a
// lost owner index entry, a zeroed leaf page.

// A record that does not decode blocks nothing: DEL, CHECK and GC exit 0 for
// its own container and for the others, and its address is never handed out.
func TestHardeningDamagedRecord(t *testing.T) {
	for _, kind := range []string{"cut", "scrambled", "codec byte", "trailing bytes"} {
		t.Run(strings.ReplaceAll(kind, " ", "-"), func(t *testing.T) {
			h := newHardNet(t, "hlh-dmg", 4)
			victim := h.ips["c001"]
			h.raw(t, func(btx *bolt.Tx) error {
				b := btx.Bucket([]byte("allocs"))
				v := bytes.Clone(b.Get(addrKeyOf(victim)))
				switch kind {
				case "cut":
					v = v[:len(v)/2]
				case "scrambled":
					for i := 3; i < len(v); i += 2 {
						v[i] ^= 0x5a
					}
				case "codec byte":
					v[0] = 0x7f
				case "trailing bytes":
					v = append(v, 1, 2, 3)
				}
				return b.Put(addrKeyOf(victim), v)
			})
			if o := h.run("DEL", "c001"); !o.OK() {
				t.Errorf("DEL of the damaged record's container: %v", o)
			} else if !strings.Contains(string(o.Stderr), victim.String()) || !strings.Contains(string(o.Stderr), "damaged") {
				t.Errorf("DEL did not log that the damaged record %s may be its own: %s", victim, o.Stderr)
			}
			if o := h.run("DEL", "c001"); !o.OK() {
				t.Errorf("DEL retried: %v", o)
			}
			if o := h.run("CHECK", "c001"); !o.OK() {
				t.Errorf("CHECK of the damaged record's container: %v", o)
			}
			if o := h.run("CHECK", "c002"); !o.OK() {
				t.Errorf("CHECK of another container: %v", o)
			}
			if o := h.run("DEL", "c000"); !o.OK() {
				t.Errorf("DEL of another container: %v", o)
			}
			gcConf := bytes.Replace(h.conf, []byte(`{"bridge"`),
				[]byte(`{"cni.dev/valid-attachments":[{"containerID":"c002","ifname":"eth0"}],"bridge"`), 1)
			if !bytes.Contains(gcConf, []byte("valid-attachments")) {
				t.Fatalf("could not build the GC config from %s", h.conf)
			}
			if o := runPlugin(h.ctx, h.call("GC", ""), gcConf); !o.OK() {
				t.Errorf("GC: %v", o)
			}
			snap := readStoreLenient(t, h.path)
			var held []string
			for _, r := range snap.records {
				held = append(held, r.ContainerID)
			}
			if !slices.Equal(held, []string{"c002"}) {
				t.Errorf("after DEL c000 and GC keeping c002 the store holds %v, want c002 only", held)
			}
			if len(snap.damaged) != 1 || snap.damaged[0].IP != victim {
				t.Errorf("damaged records: %v, want the one at %s (kept reserved)", snap.damaged, victim)
			}
			// Exhaust the /24: the damaged record's address never comes back.
			for i := range 260 {
				o := h.run("ADD", fmt.Sprintf("n%03d", i))
				if !o.OK() {
					if o.Err != nil && o.Err.Code == allocator.ErrRangeExhausted {
						break
					}
					t.Fatalf("ADD n%03d: %v", i, o)
				}
				got, _ := resultIPs(o.Stdout)
				if len(got) == 1 && got[0].Addr() == victim {
					t.Fatalf("ADD n%03d was handed %s, the damaged record's address", i, victim)
				}
			}
		})
	}
}

// A cleared bit of the taken bitmap does not hand out the held address; the
// bitmap is repaired from the records and the repair audited.
func TestHardeningClearedBitmapBit(t *testing.T) {
	h := newHardNet(t, "hlh-bit", 3)
	held := h.ips["c000"]
	h.raw(t, func(btx *bolt.Tx) error {
		tb := btx.Bucket([]byte("takenbits"))
		k := addrKeyOf(held)
		off := int(k[3]&0x0f)<<8 | int(k[4])
		k[3] &^= 0x0f
		k[4] = 0
		bm := bytes.Clone(tb.Get(k))
		bm[off/8] &^= 1 << (off % 8)
		if err := tb.Put(k, bm); err != nil {
			return err
		}
		// Make round robin start over, at the held address.
		return btx.Bucket([]byte("meta")).Delete([]byte("last_reserved.0"))
	})
	got := h.mustAdd(t, "new")
	if got == held {
		t.Fatalf("ADD handed out %s, held by c000", got)
	}
	for _, id := range []string{"c000", "c001", "c002"} {
		if o := h.run("CHECK", id); !o.OK() {
			t.Errorf("CHECK %s: %v", id, o)
		}
	}
	if acts := h.audit(t); !slices.Contains(acts, allocator.AuditIndexRepair) {
		t.Errorf("no %s audit event: %v", allocator.AuditIndexRepair, acts)
	}
	checkIntegrity(t, readStore(t, h.path))
}

// With the owner index lost, DEL still releases the container's address.
func TestHardeningLostOwnerIndex(t *testing.T) {
	for _, how := range []string{"emptied", "entry-lost"} {
		t.Run(how, func(t *testing.T) {
			h := newHardNet(t, "hlh-own", 3)
			h.raw(t, func(btx *bolt.Tx) error {
				b := btx.Bucket([]byte("ownerhash"))
				var keys [][]byte
				b.ForEach(func(k, _ []byte) error {
					ip, _ := parseAddrKey(k[8:])
					if how == "emptied" || ip == h.ips["c001"] {
						keys = append(keys, bytes.Clone(k))
					}
					return nil
				})
				for _, k := range keys {
					if err := b.Delete(k); err != nil {
						return err
					}
				}
				return nil
			})
			if o := h.run("DEL", "c001"); !o.OK() {
				t.Fatalf("DEL: %v", o)
			}
			snap := readStore(t, h.path)
			for _, r := range snap.Records {
				if r.ContainerID == "c001" {
					t.Fatalf("DEL with the owner index %s released nothing: %s still held", how, r.IP)
				}
			}
			if len(snap.Records) != 2 {
				t.Errorf("store holds %d records, want 2", len(snap.Records))
			}
			checkIntegrity(t, snap)
			if o := h.run("CHECK", "c002"); !o.OK() {
				t.Errorf("CHECK c002 after the repair: %v", o)
			}
		})
	}
}

// A leaf page with a zeroed type: DEL exits 0, and the answers of ADD and of
// an open agree with errors.go's rule (page damage is never "unreadable",
// which is what makes the daemon rebuild).
func TestHardeningZeroedLeafPage(t *testing.T) {
	h := newHardNet(t, "hlh-page", 200)
	db, err := bolt.Open(h.path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	db.View(func(btx *bolt.Tx) error { root = uint64(btx.Bucket([]byte("allocs")).RootPage()); return nil })
	pageSize := db.Info().PageSize
	db.Close()
	data, err := os.ReadFile(h.path)
	if err != nil {
		t.Fatal(err)
	}
	branch := data[int(root)*pageSize:]
	if binary.LittleEndian.Uint16(branch[8:]) != 0x01 {
		t.Skip("allocs fits one leaf page here; no branch to damage below")
	}
	first := binary.LittleEndian.Uint64(branch[16+8:]) // the lowest addresses' leaf
	binary.LittleEndian.PutUint16(data[int(first)*pageSize+8:], 0)
	if err := os.WriteFile(h.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c000", "c199", "unknown"} {
		if o := h.run("DEL", id); !o.OK() {
			t.Errorf("DEL %s on a store with a zeroed leaf page: %v", id, o)
		}
	}
	o := h.run("ADD", "new")
	if !o.OK() && (o.Err == nil || o.Err.Code == 11 || strings.Contains(o.Err.Msg, "unreadable")) {
		t.Errorf("ADD on a store with a damaged page: %v; want success or CNI 5 'store damaged', never 'unreadable' (the daemon would rebuild)", o)
	}
	s, err := store.Open(h.path, store.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("open (as the daemon does): %v", err)
	}
	err = s.View(func(tx *store.Tx) error { tx.ScanRecords(&store.RecordCache{}); return nil })
	s.Close()
	if !errors.Is(err, store.ErrPageDamaged) || errors.Is(err, store.ErrUnreadable) {
		t.Errorf("the daemon's scan: %v; want ErrStorePageDamaged (not set aside)", err)
	}
}
