package gcintegration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// scramble overwrites the stored value of the record at ip, as bit rot or a
// bad restore would: the file still opens, the record does not decode.
func (n *node) scramble(ip [4]byte) {
	n.t.Helper()
	db, err := bolt.Open(n.storePath(), 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		n.t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("allocs"))
		if b == nil {
			return errors.New("no allocs bucket")
		}
		return b.Put([]byte{4, ip[0], ip[1], ip[2], ip[3]}, []byte{0xde, 0xad, 0xbe, 0xef})
	}); err != nil {
		n.t.Fatal(err)
	}
}

// A record that does not decode is quarantined: the network keeps being swept
// (a leak beside it is reclaimed, the live record committed), the damage is
// exported, its address is never handed out while damaged, and once a READY
// sandbox is seen using it, it is re-reserved for that sandbox.
func TestDamagedRecordContained(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	live := n.add("live")
	n.cri.Ready("live", live)
	n.add("leak")
	broken := n.add("broken")
	n.scramble(broken.As4())

	d := n.startDaemon()
	eventually(t, "the leak beside the damaged record reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 1, fmt.Sprintf("reclaims %v", v)
	})
	m := d.scrape()
	if v := m.value(t, "hostlease_damaged_records", netLabel); v != 1 {
		t.Fatalf("hostlease_damaged_records = %v, want 1", v)
	}
	if v := m.value(t, "hostlease_allocations", lbl("network", network, "state", "committed")); v < 1 {
		t.Fatalf("live record not committed: %v", v)
	}
	// Two ADDs: the leak's address and the last free one; never the damaged.
	for _, id := range []string{"new-0", "new-1"} {
		if ip := n.add(id); ip == broken || ip == live {
			t.Fatalf("ADD %s got %s, which is held", id, ip)
		}
	}
	if o := n.tryAdd("new-2"); o.OK() {
		t.Fatalf("ADD on a pool whose last address is damaged succeeded: %s", o.Stdout)
	}

	// The runtime shows a READY sandbox using the damaged address.
	n.cri.Ready("broken", broken)
	eventually(t, "the damaged address re-reserved for its user", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_addresses_rereserved_total", lbl("network", network, "reason", "damaged"))
		return v == 1, fmt.Sprintf("rereserved{damaged} %v", v)
	})
	eventually(t, "no damaged record left", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_damaged_records", netLabel)
		return v == 0, fmt.Sprintf("damaged %v", v)
	})
	if r, ok := n.records()["broken"]; !ok || r.IP != broken {
		t.Fatalf("records %v, want %s held by broken", n.records(), broken)
	}
}

// An environment error (here a symlink where a store should be: ELOOP) skips
// that store for the sweep, names the errno and counts it, and never sets the
// store aside, rebuilds it or creates anything at the link's target; the
// other networks are swept as usual.
func TestEnvironmentErrorNeverRebuilds(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	live := n.add("live")
	n.cri.Ready("live", live)
	n.add("leak")
	link := filepath.Join(n.dataDir, "linked.db")
	target := filepath.Join(t.TempDir(), "target.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	d := n.startDaemon()
	eventually(t, "the environment error counted on 2 sweeps", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_store_errors_total", lbl("network", "linked", "class", "environment", "errno", "ELOOP"))
		return v >= 2, fmt.Sprintf("store_errors{linked,environment,ELOOP} %v", v)
	})
	eventually(t, "the healthy network's leak reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 1, fmt.Sprintf("reclaims %v", v)
	})
	skipped := d.logs.entries("store skipped this sweep: environment error (not damage; the store is left as it is)")
	if len(skipped) == 0 || skipped[0]["errno"] != "ELOOP" {
		t.Fatalf("log: %v, want the errno named", skipped)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("something was created at the symlink's target: %v", err)
	}
	if aside, _ := filepath.Glob(link + ".corrupt-*"); len(aside) != 0 {
		t.Fatalf("an environment error set the store aside: %v", aside)
	}
	if v, _ := d.scrape().get("hostlease_stores_rebuilt_total", lbl("network", "linked")); v != 0 {
		t.Fatalf("stores_rebuilt{linked} = %v", v)
	}
}
