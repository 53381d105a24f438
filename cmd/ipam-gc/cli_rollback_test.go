package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Rollback and return with the real binaries: hostlease gives A and B .2
// and .3, `export` writes host-local's files, the real host-local plugin
// (same ipam config) gives C and D .4 and .5; switched back to hostlease,
// the next pods must not get .4 and .5, which C and D hold: the plugin
// merges what host-local did before it chooses. C's DEL, now sent to
// hostlease, frees C's address; a later `import` finds nothing left to do.
// The same holds when hostlease served an ADD between the export and the
// switch, and when host-local also freed an exported reservation.
func TestRollbackAndReturnNeverHandsOutTwice(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between runs after the export, before host-local takes over.
		between func(t *testing.T, n ipamNet) []netip.Addr
	}{
		{"switch right after the export", nil},
		{"an ADD under hostlease after the export, then a second export", func(t *testing.T, n ipamNet) []netip.Addr {
			ips := add(t, n, "x-after-export")
			if r := gcExec(t, "export", "--data-dir", n.dataDir, "--network", n.name); r.code != 0 {
				t.Fatalf("second export:\n%s", r)
			}
			return ips
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			n := ipamNet{name: "rbnet", dataDir: dataDir, rangeSets: subnets("10.78.0.0/24")}
			holder := map[netip.Addr]string{}
			hold := func(id string, ips []netip.Addr) {
				t.Helper()
				for _, ip := range ips {
					if prev, ok := holder[ip]; ok {
						t.Errorf("%s handed out to %s while %s holds it", ip, id, prev)
					}
					holder[ip] = id
				}
			}
			hold("a", add(t, n, "a"))
			hold("b", add(t, n, "b"))
			if r := gcExec(t, "export", "--data-dir", dataDir, "--network", n.name); r.code != 0 || !strings.Contains(r.stdout, "exported 2 reservation(s)") {
				t.Fatalf("export:\n%s", r)
			}
			if tc.between != nil {
				hold("x-after-export", tc.between(t, n))
			}
			// Rolled back: host-local with the same config.
			for _, id := range []string{"c", "d"} {
				hold(id, cniExec(t, n, pluginCall{plugin: "host-local", command: "ADD", containerID: id}))
			}
			cniExec(t, n, pluginCall{plugin: "host-local", command: "DEL", containerID: "b"})
			for ip, id := range holder {
				if id == "b" {
					delete(holder, ip)
				}
			}
			// Returned to hostlease. A CHECK before any write merged sees
			// what host-local reserved (read-only).
			if _, err := cniTry(t, n, pluginCall{plugin: "hostlease", command: "CHECK", containerID: "c"}); err != nil {
				t.Errorf("CHECK of a pod host-local started, before hostlease's first write: %v", err)
			}
			if _, err := cniTry(t, n, pluginCall{plugin: "hostlease", command: "CHECK", containerID: "nobody"}); err == nil {
				t.Errorf("CHECK of an attachment nobody reserved succeeded")
			}
			for _, id := range []string{"e", "f"} {
				hold(id, add(t, n, id))
			}
			recs := (&fixture{dir: dataDir}).records(t, n.name)
			for ip, id := range holder {
				if id == "b" {
					continue
				}
				if r, ok := recs[ip]; !ok || r.ContainerID != id {
					t.Errorf("after the return the store holds %s for %q, want %s", ip, r.ContainerID, id)
				}
			}
			cniExec(t, n, pluginCall{plugin: "hostlease", command: "DEL", containerID: "c"})
			var cIP netip.Addr
			for ip, id := range holder {
				if id == "c" {
					cIP = ip
				}
			}
			if r, ok := (&fixture{dir: dataDir}).records(t, n.name)[cIP]; ok {
				t.Errorf("hostlease DEL of c (a host-local reservation) left %s held: %+v", cIP, r)
			}
			r := gcExec(t, "import", "--data-dir", dataDir, "--network", n.name)
			if r.code != 0 || !strings.Contains(r.stdout, "; 0 conflict(s)") {
				t.Errorf("import after the return:\n%s", r)
			}
		})
	}
}

// `import` names every conflict: host-local ran without an export first (so
// it handed out .2, which hostlease holds for A) and gave D .3. Import
// keeps .2 for the store's holder, imports .3, prints one line per
// conflict with the address and both owners, counts them, audits each as
// import-conflict by cli:import, and exits 4; the next ADD gets neither.
func TestImportReportsConflicts(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "cfnet", dataDir: dataDir, rangeSets: subnets("10.79.0.0/24")}
	a := add(t, n, "a")[0]
	hlC := cniExec(t, n, pluginCall{plugin: "host-local", command: "ADD", containerID: "c"})[0]
	hlD := cniExec(t, n, pluginCall{plugin: "host-local", command: "ADD", containerID: "d"})[0]
	if hlC != a {
		t.Fatalf("setup: host-local without an export gave c %s, want %s (hostlease's a)", hlC, a)
	}
	r := gcExec(t, "import", "--data-dir", dataDir, "--network", n.name)
	wantLine := "conflict " + a.String() + ": host-local's file names container c ifname eth0; the store holds it for container a ifname eth0"
	if r.code != 4 || !strings.Contains(r.stdout, wantLine) ||
		!strings.Contains(r.stdout, "imported 1 reservation(s)") || !strings.Contains(r.stdout, "; 1 conflict(s)") ||
		!strings.Contains(r.stderr, "1 address(es)") {
		t.Fatalf("import with a conflict: want exit 4, the line %q and the counts\n%s", wantLine, r)
	}
	assertTerminalSafe(t, "import", r.stdout)
	recs := (&fixture{dir: dataDir}).records(t, n.name)
	if recs[a].ContainerID != "a" || recs[hlD].ContainerID != "d" {
		t.Errorf("after the import: %s held for %q, %s for %q; want a and d", a, recs[a].ContainerID, hlD, recs[hlD].ContainerID)
	}
	var conflicts []allocator.AuditEvent
	for _, ev := range auditOf(t, store.FilePath(dataDir, n.name)) {
		if ev.Action == allocator.AuditImportConflict {
			conflicts = append(conflicts, ev)
		}
	}
	if len(conflicts) != 1 || conflicts[0].IP != a || conflicts[0].ContainerID != "c" || conflicts[0].By != "cli:import" ||
		!strings.Contains(conflicts[0].Reason, `container "a"`) {
		t.Errorf("import-conflict audit entries: %+v", conflicts)
	}
	if ips := add(t, n, "e"); ips[0] == a || ips[0] == hlD {
		t.Errorf("ADD after the import got %s, held by a (and c) or d", ips[0])
	}
	// The conflict is reported again by the next import, never dropped.
	if r := gcExec(t, "import", "--data-dir", dataDir, "--network", n.name); r.code != 4 || !strings.Contains(r.stdout, wantLine) {
		t.Errorf("second import:\n%s", r)
	}
}

// Every audit entry names who acted: the plugin ("plugin"), the CLI verb
// ("cli:import", "cli:release", "cli:rebuild"), and an index repair names
// whoever opened the store (here `release`), not a generic "hostlease".
func TestAuditNamesWhoActed(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "actnet", dataDir: dataDir, rangeSets: subnets("10.80.0.0/24")}
	hl := filepath.Join(dataDir, n.name)
	if err := os.MkdirAll(hl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hl, "10.80.0.50"), []byte("old\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	add(t, n, "a") // the plugin's first use imports 10.80.0.50
	b := add(t, n, "b")[0]
	cniExec(t, n, pluginCall{plugin: "hostlease", command: "DEL", containerID: "a"})
	if err := os.WriteFile(filepath.Join(hl, "10.80.0.51"), []byte("old2\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, "import", "--data-dir", dataDir, "--network", n.name); r.code != 0 {
		t.Fatalf("import:\n%s", r)
	}
	path := store.FilePath(dataDir, n.name)
	// Lose a derived index: the next read-write open repairs it, audited.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("ownerhash")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if r := gcExec(t, "release", "--data-dir", dataDir, "--network", n.name, "--yes", b.String()); r.code != 0 {
		t.Fatalf("release:\n%s", r)
	}

	var got []string // action by, oldest first
	for _, ev := range auditOf(t, path) {
		got = append(got, ev.Action+" "+ev.By)
	}
	want := []string{
		allocator.AuditImport + " plugin",             // the first ADD's migration
		allocator.AuditRelease + " plugin",            // a's DEL
		allocator.AuditImport + " cli:import",         // import
		allocator.AuditIndexRepair + " cli:release",   // release's open
		allocator.AuditManualRelease + " cli:release", // release b
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit log (action by):\n got %q\nwant %q", got, want)
	}

	// The rebuilt store's log starts with the rebuild.
	cri := startCRI(t)
	cri.Ready("old", netip.MustParseAddr("10.80.0.50"))
	if r := gcExec(t, "rebuild", "--data-dir", dataDir, "--network", n.name, "--cri-endpoint", cri.Endpoint(), "--force"); r.code != 0 {
		t.Fatalf("rebuild --force:\n%s", r)
	}

	if evs := auditOf(t, path); len(evs) == 0 || evs[0].Action != allocator.AuditRebuild || evs[0].By != "cli:rebuild" {
		t.Errorf("rebuilt store's audit log: %+v, want a rebuild by cli:rebuild first", evs)
	}
}

// After an export the plugin reads host-local's directory again, by the
// same trust rules as at first use: a directory others can write is
// refused. ADD then fails naming it (it cannot know what host-local handed
// out); DEL still exits 0 and releases what the store holds.
func TestExportedStoreRefusesUntrustedHostLocalState(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "untr", dataDir: dataDir, rangeSets: subnets("10.82.0.0/24")}
	a := add(t, n, "a")[0]
	if r := gcExec(t, "export", "--data-dir", dataDir, "--network", n.name); r.code != 0 {
		t.Fatalf("export:\n%s", r)
	}
	hl := filepath.Join(dataDir, n.name)
	if err := os.Chmod(hl, 0o777); err != nil {
		t.Fatal(err)
	}
	// Another file appears (host-local ran); the directory is writable by anyone.
	if err := os.WriteFile(filepath.Join(hl, "10.82.0.9"), []byte("evil\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := cniTry(t, n, pluginCall{plugin: "hostlease", command: "ADD", containerID: "b"})
	if err == nil || !strings.Contains(err.Error(), hl) || !strings.Contains(err.Error(), `"code": 5`) && !strings.Contains(err.Error(), `"code":5`) {
		t.Errorf("ADD beside an untrusted host-local directory of an exported store: %v; want error 5 naming %s", err, hl)
	}
	if _, err := cniTry(t, n, pluginCall{plugin: "hostlease", command: "DEL", containerID: "a"}); err != nil {
		t.Errorf("DEL: %v", err)
	}
	recs := (&fixture{dir: dataDir}).records(t, n.name)
	if r, ok := recs[a]; ok {
		t.Errorf("DEL of a left %s held: %+v", a, r)
	}
	if r, ok := recs[netip.MustParseAddr("10.82.0.9")]; ok {
		t.Errorf("the untrusted directory's file was imported: %+v", r)
	}
}
