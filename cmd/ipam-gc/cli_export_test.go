package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// A rollback from hostlease to host-local on a network whose ipam config
// names a dataDir: `export --data-dir D` (no --host-local-dir) must write
// host-local's files where host-local will read them with that same config,
// D/<network>/, so the real host-local plugin, run with the config
// hostlease had, keeps every reservation: it never hands out an exported
// address, sees the pool as full as it is, and releases an exported
// reservation on its owner's DEL.
func TestExportCustomDataDirRollbackKeepsEveryReservation(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "rollnet", dataDir: dataDir, rangeSets: subnets("10.77.0.0/29", "fd00:77::/125")}
	held := map[netip.Addr]string{} // address -> owner
	for _, id := range []string{"sandbox-a", "sandbox-b", "sandbox-c"} {
		for _, ip := range add(t, n, id) {
			held[ip] = id
		}
	}
	if len(held) != 6 {
		t.Fatalf("hostlease handed out %d addresses for 3 dual-stack pods: %v", len(held), held)
	}

	r := gcExec(t, "export", "--data-dir", dataDir, "--network", "rollnet")
	hlDir := filepath.Join(dataDir, "rollnet")
	if r.code != 0 || !strings.Contains(r.stdout, "exported 6 reservation(s) to "+hlDir) {
		t.Fatalf("export --data-dir %s: want 6 reservations written to %s\n%s", dataDir, hlDir, r)
	}
	for ip, id := range held {
		b, err := os.ReadFile(filepath.Join(hlDir, ip.String()))
		if err != nil || string(b) != id+"\r\neth0" {
			t.Errorf("host-local reservation file for %s: %q %v, want %q", ip, b, err, id+"\r\neth0")
		}
	}

	// host-local, with the config hostlease had, continues from there.
	for _, id := range []string{"after-1", "after-2"} {
		ips := cniExec(t, n, pluginCall{plugin: "host-local", command: "ADD", containerID: id})
		for _, ip := range ips {
			if owner, ok := held[ip]; ok {
				t.Errorf("host-local handed out %s to %s after the rollback; %s still holds it", ip, id, owner)
			}
		}
	}
	// 10.77.0.0/29 has 5 usable addresses (.2-.6): 3 exported + 2 new.
	if _, err := cniTry(t, n, pluginCall{plugin: "host-local", command: "ADD", containerID: "after-3"}); err == nil ||
		!strings.Contains(err.Error(), "no IP addresses available") {
		t.Errorf("host-local after the rollback: a 6th IPv4 address was handed out (%v): it did not see every exported reservation", err)
	}
	cniExec(t, n, pluginCall{plugin: "host-local", command: "DEL", containerID: "sandbox-b"})
	for ip, id := range held {
		_, err := os.Stat(filepath.Join(hlDir, ip.String()))
		if gone := os.IsNotExist(err); gone != (id == "sandbox-b") {
			t.Errorf("after host-local DEL of sandbox-b, reservation %s of %s gone=%v", ip, id, gone)
		}
	}
}

// Import reads host-local's state from the same place: host-local with a
// dataDir keeps it under dataDir/<network>/, beside hostlease's store.
func TestImportCustomDataDir(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "impnet", dataDir: dataDir, rangeSets: subnets("10.78.0.0/28")}
	var hostLocal []netip.Addr
	for _, id := range []string{"hl-a", "hl-b"} {
		hostLocal = append(hostLocal, cniExec(t, n, pluginCall{plugin: "host-local", command: "ADD", containerID: id})...)
	}
	r := gcExec(t, "import", "--data-dir", dataDir, "--network", "impnet")
	if r.code != 0 || !strings.Contains(r.stdout, "imported 2 reservation(s) from "+filepath.Join(dataDir, "impnet")) {
		t.Fatalf("import --data-dir %s: want 2 reservations from %s\n%s", dataDir, filepath.Join(dataDir, "impnet"), r)
	}
	got := add(t, n, "hostlease-a")
	if slices.Contains(hostLocal, got[0]) {
		t.Errorf("hostlease ADD after import got %s, which host-local holds (%v)", got[0], hostLocal)
	}
	f := &fixture{dir: dataDir}
	recs := f.records(t, "impnet")
	for i, ip := range hostLocal {
		if rec, ok := recs[ip]; !ok || rec.ContainerID != []string{"hl-a", "hl-b"}[i] || rec.Source != "host-local" {
			t.Errorf("imported record for %s: %+v (present %v)", ip, rec, ok)
		}
	}
}

// Every path the CLI derives from a flag is checked before anything is
// read or written: a mistyped directory or a network name that is a path
// is refused, naming the flag, and creates nothing.
func TestHostLocalDirectoryFlags(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "dirnet", dataDir: dataDir, rangeSets: subnets("10.79.0.0/28")}
	add(t, n, "sandbox-a")
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	file := filepath.Join(dataDir, "dirnet.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"export", "--data-dir", dataDir, "--network", "dirnet", "--host-local-dir", missing}, 1, "--host-local-dir " + missing + ": no such directory"},
		{[]string{"import", "--data-dir", dataDir, "--network", "dirnet", "--host-local-dir", missing}, 1, "--host-local-dir " + missing + ": no such directory"},
		{[]string{"export", "--data-dir", dataDir, "--network", "dirnet", "--host-local-dir", file}, 1, "--host-local-dir " + file + ": not a directory"},
		{[]string{"export", "--data-dir", missing, "--network", "dirnet"}, 1, "--data-dir " + missing + ": no such directory"},
		{[]string{"import", "--data-dir", missing, "--network", "dirnet"}, 1, "--data-dir " + missing + ": no such directory"},
		{[]string{"export", "--data-dir", dataDir, "--network", "../dirnet"}, 2, `--network "../dirnet" is not a network name`},
		{[]string{"import", "--data-dir", dataDir, "--network", "a/b"}, 2, `--network "a/b" is not a network name`},
		{[]string{"rebuild", "--data-dir", dataDir, "--network", ".."}, 2, `--network ".." is not a network name`},
		{[]string{"export", "--data-dir", dataDir, "--network", "nonet"}, 1, "no store for network nonet"},
	} {
		r := gcExec(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: want exit %d naming %q\n%s", tc.args, tc.code, tc.want, r)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a refused command created %s", missing)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "nonet")); !os.IsNotExist(err) {
		t.Errorf("export of a network without a store created host-local state for it")
	}
}

// The plugin's rule, which export and import follow without --host-local-dir.
func TestHostLocalBaseFor(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{allocator.DefaultStoreDir, allocator.DefaultHostLocalDir},
		{allocator.DefaultStoreDir + "/", allocator.DefaultHostLocalDir},
		{"/srv/cni", "/srv/cni"},
		{"/var/lib/cni/networks", "/var/lib/cni/networks"},
	} {
		if got := allocator.HostLocalBaseFor(tc.store); got != tc.want {
			t.Errorf("HostLocalBaseFor(%q) = %q, want %q", tc.store, got, tc.want)
		}
	}
}

// A network name too long for "<name>.db" (the plugin then names the store
// file by a hash): the CLI finds the store where the plugin put it, shows
// the network's real name, and exports to host-local's <dataDir>/<name>/.
func TestLongNetworkName(t *testing.T) {
	dataDir := t.TempDir()
	name := "n" + strings.Repeat("x", 252) // 253 bytes: "<name>.db" exceeds NAME_MAX
	n := ipamNet{name: name, dataDir: dataDir, rangeSets: subnets("10.89.0.0/24")}
	ip := add(t, n, "sandbox-long")[0]
	if _, err := os.Stat(store.FilePath(dataDir, name)); err != nil {
		t.Fatalf("the plugin's store for a long name: %v", err)
	}
	f := &fixture{dir: dataDir}
	if recs := f.records(t, name); recs[ip].ContainerID != "sandbox-long" {
		t.Errorf("list --network <253 bytes>: %+v", recs)
	}
	r := gcExec(t, "status", "--data-dir", dataDir)
	if r.code != 0 || !strings.Contains(r.stdout, name+"  0") {
		t.Errorf("status does not show the network's full name:\n%s", r)
	}
	r = gcExec(t, "export", "--data-dir", dataDir, "--network", name)
	if b, err := os.ReadFile(filepath.Join(dataDir, name, ip.String())); r.code != 0 || err != nil || string(b) != "sandbox-long\r\neth0" {
		t.Errorf("export of a long-named network: %q %v\n%s", b, err, r)
	}
}

// A store whose stored range sets no longer decode still exports every
// reservation (only host-local's round-robin points are lost).
func TestExportWithDamagedRangeSets(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "dr", dataDir: dataDir, rangeSets: subnets("10.90.0.0/24")}
	ips := []netip.Addr{add(t, n, "sandbox-a")[0], add(t, n, "sandbox-b")[0]}
	path := store.FilePath(dataDir, "dr")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("ranges"), []byte{0xde, 0xad}) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r := gcExec(t, "export", "--data-dir", dataDir, "--network", "dr")
	if r.code != 0 || !strings.Contains(r.stdout, "exported 2 reservation(s)") {
		t.Fatalf("export with damaged range sets:\n%s", r)
	}
	for i, ip := range ips {
		if b, err := os.ReadFile(filepath.Join(dataDir, "dr", ip.String())); err != nil || string(b) != []string{"sandbox-a", "sandbox-b"}[i]+"\r\neth0" {
			t.Errorf("reservation file for %s: %q %v", ip, b, err)
		}
	}
	r = gcExec(t, "status", "--data-dir", dataDir)
	if r.code != 0 || !strings.Contains(r.stdout, "ranges unknown") {
		t.Errorf("status with damaged range sets: want a note, exit 0\n%s", r)
	}
}
