package allocator

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	hl "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
)

// hostLocalSets loads range sets through host-local's own config code, so the
// test drives host-local's allocator and hostlease with the same ranges (the
// plugin's loader yields the same canonical sets: netconf's
// TestLoaderMatchesHostLocal).
func hostLocalSets(t *testing.T, ranges string) ([]hl.RangeSet, []StoredRangeSet) {
	t.Helper()
	conf := []byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"host-local","ranges":` + ranges + `}}`)
	ref, _, err := hl.LoadIPAMConfig(conf, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := func(ip net.IP) netip.Addr { a, _ := netip.AddrFromSlice(ip); return a.Unmap() }
	sets := make([]StoredRangeSet, len(ref.Ranges))
	for i, set := range ref.Ranges {
		for _, r := range set {
			ones, _ := r.Subnet.Mask.Size()
			sets[i].Ranges = append(sets[i].Ranges, StoredRange{Subnet: netip.PrefixFrom(addr(r.Subnet.IP), ones),
				Start: addr(r.RangeStart), End: addr(r.RangeEnd), Gateway: addr(r.Gateway)})
		}
	}
	return ref.Ranges, sets
}

// hostLocalAdd reserves one address per range set with host-local's own
// allocator and disk store, as its ADD does.
func hostLocalAdd(t *testing.T, store *disk.Store, sets []hl.RangeSet, id, ifname string) []string {
	t.Helper()
	var out []string
	for idx := range sets {
		ipc, err := hl.NewIPAllocator(&sets[idx], store, idx).Get(id, ifname, nil)
		if err != nil {
			t.Fatalf("host-local Get %s: %v", id, err)
		}
		out = append(out, ipc.Address.IP.String())
	}
	return out
}

type recordKey struct {
	IP, ContainerID, IfName string
	RangeSet, PrefixLen     int
	Gateway                 string
}

func storeRecords(t *testing.T, s *memStore) []recordKey {
	t.Helper()
	var out []recordKey
	view(t, s, func(tx Store) error {
		return forEach(tx, func(r *Record) error {
			gw := ""
			if r.Gateway.IsValid() {
				gw = r.Gateway.String()
			}
			out = append(out, recordKey{r.IP.String(), r.ContainerID, r.IfName, r.RangeSet, r.PrefixLen, gw})
			return nil
		})
	})
	return out
}

func TestImportHostLocal(t *testing.T) {
	dataDir := t.TempDir()
	sets, stored := hostLocalSets(t, `[[{"subnet":"10.0.0.0/28"}],[{"subnet":"fd00::/124"}]]`)
	hlStore, err := disk.New("net1", dataDir) // creates <dataDir>/net1 and its lock file
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "c1", hostLocalAdd(t, hlStore, sets, "c1", "eth0"), []string{"10.0.0.2", "fd00::2"})
	eq(t, "c2", hostLocalAdd(t, hlStore, sets, "c2", "eth0"), []string{"10.0.0.3", "fd00::3"})
	eq(t, "c1/net1", hostLocalAdd(t, hlStore, sets, "c1", "net1"), []string{"10.0.0.4", "fd00::4"})
	if err := hlStore.ReleaseByID("c2", "eth0"); err != nil {
		t.Fatal(err)
	}
	hlStore.Close()
	dir := HostLocalDir(dataDir, "net1")
	// Files older host-local versions and other platforms left.
	for name, content := range map[string]string{
		"10.0.0.9":  "legacy", // container ID alone
		"fd00__9":   "c9\r\neth0",
		"10.9.9.9":  "c8\r\neth0", // outside every range set (config changed)
		"notes.txt": "not an address",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "10.0.0.10"), 0o755) // a directory named like an address
	if _, err := os.Stat(filepath.Join(dir, "lock")); err != nil {
		t.Fatalf("host-local did not leave its lock file: %v", err)
	}

	s := newStore(t)
	var n int
	update(t, s, func(tx Store) error {
		n, err = ImportHostLocal(tx, dir, "net1", stored, testTime)
		return err
	})
	if n != 7 {
		t.Errorf("imported %d reservations, want 7", n)
	}
	eq(t, "imported records", storeRecords(t, s), []recordKey{
		{"10.0.0.2", "c1", "eth0", 0, 28, "10.0.0.1"},
		{"10.0.0.4", "c1", "net1", 0, 28, "10.0.0.1"},
		{"10.0.0.9", "legacy", "", 0, 28, "10.0.0.1"},
		{"10.9.9.9", "c8", "eth0", -1, 0, ""},
		{"fd00::2", "c1", "eth0", 1, 124, "fd00::1"},
		{"fd00::4", "c1", "net1", 1, 124, "fd00::1"},
		{"fd00::9", "c9", "eth0", 1, 124, "fd00::1"},
	})
	if len(s.audit) != 1 || s.audit[0].Action != "import" {
		t.Errorf("audit log = %+v, want one import event", s.audit)
	}
	eq(t, "last reserved 0", lastReserved(t, s, 0), "10.0.0.4")
	eq(t, "last reserved 1", lastReserved(t, s, 1), "fd00::4")
	view(t, s, func(tx Store) error {
		r, _ := tx.Lookup(netip.MustParseAddr("10.0.0.2"))
		if r.State != StateCommitted || r.Source != "host-local" || r.Network != "net1" || !r.Created.Equal(testTime) {
			t.Errorf("imported record = %+v, want committed, source host-local", r)
		}
		if hl, _ := tx.Records(Query{Imported: true}); len(hl) != 7 {
			t.Errorf("HostLocalRecords lists %d records, want the 7 imported", len(hl))
		}
		return nil
	})

	// hostlease continues where host-local stopped and never hands out what
	// host-local holds.
	eq(t, "next ADD", mustGet(t, s, stored, "c3"), []string{"10.0.0.5", "fd00::5"})
	eq(t, "a DEL finds ID-only records", release(t, s, "legacy", "eth0"), []string{"10.0.0.9"})
	eq(t, "a DEL finds imported records", release(t, s, "c1", "net1"), []string{"10.0.0.4", "fd00::4"})

	// Importing again adds nothing and keeps newer state.
	update(t, s, func(tx Store) error {
		n, err = ImportHostLocal(tx, dir, "net1", stored, testTime)
		return err
	})
	eq(t, "last reserved kept", lastReserved(t, s, 0), "10.0.0.5")
	view(t, s, func(tx Store) error {
		r, _ := tx.Lookup(netip.MustParseAddr("10.0.0.5"))
		if r == nil || r.ContainerID != "c3" {
			t.Errorf("re-import overwrote 10.0.0.5: %+v", r)
		}
		return nil
	})

	// No host-local state: nothing to import, no error.
	update(t, newStore(t), func(tx Store) error {
		if n, err := ImportHostLocal(tx, filepath.Join(dataDir, "nonexistent"), "x", stored, testTime); n != 0 || err != nil {
			t.Errorf("import of a missing dir = %d, %v", n, err)
		}
		return nil
	})
}

// TestImportMatchesHostLocalChoices runs host-local's allocator and hostlease
// side by side after an import: every later ADD must pick the same address.
func TestImportMatchesHostLocalChoices(t *testing.T) {
	dataDir := t.TempDir()
	sets, stored := hostLocalSets(t, `[[{"subnet":"10.0.0.0/28","rangeStart":"10.0.0.3","rangeEnd":"10.0.0.9","gateway":"10.0.0.5"},{"subnet":"10.0.1.0/29"}]]`)
	hlStore, err := disk.New("net1", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer hlStore.Close()
	for i := range 6 {
		hostLocalAdd(t, hlStore, sets, fmt.Sprint("c", i), "eth0")
	}
	hlStore.ReleaseByID("c1", "eth0")
	hlStore.ReleaseByID("c4", "eth0")
	s := newStore(t)
	update(t, s, func(tx Store) error {
		_, err := MigrateOnce(tx, HostLocalDir(dataDir, "net1"), "net1", stored, testTime)
		return err
	})
	for i := 6; i < 16; i++ {
		id := fmt.Sprint("c", i)
		r := alloc(t, s, stored, id, "eth0")
		ipc, hlErr := hl.NewIPAllocator(&sets[0], hlStore, 0).Get(id, "eth0", nil)
		if (r.err == nil) != (hlErr == nil) {
			t.Fatalf("ADD %s: hostlease %v %v, host-local %v %v", id, r.ips(), r.err, ipc, hlErr)
		}
		if hlErr != nil {
			break
		}
		eq(t, "ADD "+id, r.ips(), []string{ipc.Address.IP.String()})
	}
}

func TestExportRoundTrip(t *testing.T) {
	_, stored := hostLocalSets(t, `[[{"subnet":"10.0.0.0/28"}],[{"subnet":"fd00::/124"}]]`)
	s := newStore(t)
	mustGet(t, s, stored, "c1")
	mustGet(t, s, stored, "c2")
	mustGet(t, s, stored, "c3")
	release(t, s, "c2", "eth0")
	update(t, s, func(tx Store) error {
		r := rec("10.0.0.12", "legacy", "")
		r.RangeSet, r.PrefixLen, r.Gateway = 0, 28, netip.MustParseAddr("10.0.0.1")
		return tx.Put(r)
	})
	dir := filepath.Join(t.TempDir(), "net1")
	var n int
	view(t, s, func(tx Store) error {
		res, err := ExportHostLocal(tx, dir, "net1", nil, ByPlugin, testTime)
		n = res.Written
		return err
	})
	eq(t, "exported", n, 5)
	// The files are host-local's format, byte for byte.
	got := map[string]string{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		got[e.Name()] = string(b)
	}
	eq(t, "files", got, map[string]string{
		"10.0.0.2": "c1\r\neth0", "fd00::2": "c1\r\neth0",
		"10.0.0.4": "c3\r\neth0", "fd00::4": "c3\r\neth0",
		"10.0.0.12":          "legacy",
		"last_reserved_ip.0": "10.0.0.4", "last_reserved_ip.1": "fd00::4",
	})
	// host-local's own store reads them.
	hlStore, err := disk.New("net1", filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer hlStore.Close()
	var held []string
	for _, ip := range hlStore.GetByID("c3", "eth0") {
		held = append(held, ip.String())
	}
	slices.Sort(held)
	eq(t, "host-local GetByID(c3)", held, []string{"10.0.0.4", "fd00::4"})
	if last, err := hlStore.LastReservedIP("1"); err != nil || !last.Equal(net.ParseIP("fd00::4")) {
		t.Errorf("host-local LastReservedIP(1) = %v, %v", last, err)
	}

	// Import into a fresh store: the same reservations and round-robin points.
	s2 := newStore(t)
	update(t, s2, func(tx Store) error {
		_, err := ImportHostLocal(tx, dir, "net1", stored, testTime.Add(time.Hour))
		return err
	})
	eq(t, "records after the round trip", storeRecords(t, s2), storeRecords(t, s))
	for i := range stored {
		eq(t, fmt.Sprint("last reserved ", i), lastReserved(t, s2, i), lastReserved(t, s, i))
	}
	eq(t, "next ADD after the round trip", mustGet(t, s2, stored, "c4"), mustGet(t, s, stored, "c4"))
}
