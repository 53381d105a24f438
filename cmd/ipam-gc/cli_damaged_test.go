package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/internal/testing/fakecri"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// listEntry is one element of `list -o json`: a record, or a damaged record
// (state "damaged" with its decode error), as these tests look at it.
type listEntry struct {
	ContainerID, State, Source, Error string
}

func listJSON(t *testing.T, dataDir string) (map[netip.Addr]listEntry, int) {
	t.Helper()
	r := gcExec(t, "list", "--data-dir", dataDir, "-o", "json")
	recs, damaged, err := daemon.DecodeList([]byte(r.stdout))
	if err != nil {
		t.Fatalf("list -o json does not decode into its rows: %v\n%s", err, r)
	}
	m := map[netip.Addr]listEntry{}
	for _, rec := range recs {
		m[rec.IP] = listEntry{ContainerID: rec.ContainerID, State: string(rec.State), Source: rec.Source}
	}
	for _, d := range damaged {
		ip, _ := netip.ParseAddr(d.IP) // "" (a damaged key) is the zero address
		m[ip] = listEntry{ContainerID: d.ContainerID, State: d.State, Error: d.Error}
	}
	return m, r.code
}

// One record whose value no longer decodes (cut short, as a torn write or
// bit rot leaves it): list and status show it as DAMAGED with its address
// and decode error and exit 3, the other records stay visible, `release IP`
// frees it with an audit entry, and afterwards everything is clean (exit 0).
func TestDamagedRecordListStatusRelease(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "dmg", dataDir: dataDir, rangeSets: subnets("10.83.0.0/24")}
	a, b, c := add(t, n, "sandbox-a")[0], add(t, n, "sandbox-b")[0], add(t, n, "sandbox-c")[0]
	path := store.FilePath(dataDir, "dmg")
	damageRecord(t, path, b, storedValue(t, path, b)[:9])

	r := gcExec(t, "list", "--data-dir", dataDir)
	if r.code != exitDamaged || !strings.Contains(r.stderr, "1 record(s) do not decode") {
		t.Errorf("list with a damaged record: want exit %d naming it\n%s", exitDamaged, r)
	}
	rows := assertAligned(t, r.stdout, 3)
	var damagedRow []string
	for _, row := range rows {
		if row[1] == b.String() {
			damagedRow = row
		}
	}
	if damagedRow == nil || damagedRow[5] != "DAMAGED" || damagedRow[9] == "" || damagedRow[9] == "-" {
		t.Errorf("list: want a DAMAGED row for %s with its decode error:\n%s", b, r.stdout)
	}
	recs, code := listJSON(t, dataDir)
	if code != exitDamaged || recs[b].State != "damaged" || recs[b].Error == "" || recs[a].ContainerID != "sandbox-a" || recs[c].ContainerID != "sandbox-c" {
		t.Errorf("list -o json (exit %d): %+v", code, recs)
	}

	r = gcExec(t, "status", "--data-dir", dataDir)
	if r.code != exitDamaged || !strings.Contains(r.stdout, "DAMAGED record "+b.String()+": ") {
		t.Errorf("status with a damaged record: want exit %d and a DAMAGED row for %s\n%s", exitDamaged, b, r)
	}
	r = gcExec(t, "status", "--data-dir", dataDir, "-o", "json")
	pools, err := daemon.DecodeRows[daemon.PoolRow]([]byte(r.stdout))
	if err != nil || r.code != exitDamaged {
		t.Fatalf("status -o json: %v\n%s", err, r)
	}
	if len(pools) != 2 || pools[0].Damaged != 1 || pools[0].Used != 3 || pools[1].IP != b.String() || pools[1].Damage == "" {
		t.Errorf("status -o json: %+v, want the pool with 1 damaged of 3 used, and a row for %s", pools, b)
	}

	// leaks never offers a damaged record's address, and says it exists.
	cri := startCRI(t)
	cri.Ready("sandbox-a", a)
	cri.Ready("sandbox-c", c)
	r = gcExec(t, "leaks", "--no-api", "--data-dir", dataDir, "--cri-endpoint", cri.Endpoint())
	if r.code != exitDamaged || !strings.Contains(r.stderr, "no leak candidates found") || !strings.Contains(r.stderr, "1 record(s) do not decode") {
		t.Errorf("leaks with a damaged record: want no candidates, exit %d naming the damage\n%s", exitDamaged, r)
	}

	// --sandbox never releases a damaged record (its owner is unreadable).
	if r := gcExec(t, "release", "--data-dir", dataDir, "--sandbox", "sandbox-b", "--yes"); r.code != 1 || !strings.Contains(r.stderr, "no allocation found") {
		t.Errorf("release --sandbox of a damaged record's owner:\n%s", r)
	}
	r = gcExec(t, "release", "--data-dir", dataDir, b.String(), "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, b.String()+" DAMAGED record") || !strings.Contains(r.stdout, "released 1 address(es)") {
		t.Fatalf("release of a damaged record:\n%s", r)
	}
	recs, code = listJSON(t, dataDir)
	if _, ok := recs[b]; ok || code != 0 || len(recs) != 2 {
		t.Errorf("after release: exit %d, %+v", code, recs)
	}
	var audited bool
	for _, e := range auditOf(t, path) {
		audited = audited || e.Action == allocator.AuditDamagedRelease && e.IP == b && e.By == "cli:release"
	}
	if !audited {
		t.Errorf("no %s audit entry for %s: %+v", allocator.AuditDamagedRelease, b, auditOf(t, path))
	}
	if r := gcExec(t, "audit", "--data-dir", dataDir); r.code != 0 || !strings.Contains(r.stdout, "damaged-release  "+b.String()) {
		t.Errorf("audit does not show the damaged release of %s:\n%s", b, r)
	}
	if r := gcExec(t, "status", "--data-dir", dataDir); r.code != 0 {
		t.Errorf("status after the release: %s", r)
	}
	// The released address can be handed out again.
	for i := 0; i < 2; i++ {
		if got := add(t, n, "sandbox-new-"+string(rune('a'+i)))[0]; got == a || got == c {
			t.Fatalf("ADD handed out %s, still held", got)
		}
	}
}

// rebuild on a store that opens but holds damaged records sets it aside and
// rebuilds it (daemon.RebuildStore) from the runtime and from what still
// decodes: a damaged address a READY sandbox uses is recorded for it, one no
// sandbox uses stays reserved (never handed out at once), every healthy
// record (a pending ADD the runtime does not list yet included) is kept.
// rebuild --force does the same on a healthy or logically damaged store.
func TestRebuildDamagedStore(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "rb", dataDir: dataDir, rangeSets: subnets("10.84.0.0/28")}
	ips := map[string]netip.Addr{}
	for _, id := range []string{"ready-ok", "ready-damaged", "gone-damaged", "pending-ok"} {
		ips[id] = add(t, n, id)[0]
	}
	path := store.FilePath(dataDir, "rb")
	damageRecord(t, path, ips["ready-damaged"], []byte{0xff, 0x00, 0x13})
	damageRecord(t, path, ips["gone-damaged"], storedValue(t, path, ips["gone-damaged"])[:7])

	cri := startCRI(t)
	cri.Ready("ready-ok", ips["ready-ok"])
	cri.Ready("ready-damaged", ips["ready-damaged"])

	r := gcExec(t, "rebuild", "--data-dir", dataDir, "--network", "rb", "--cri-endpoint", cri.Endpoint())
	if r.code != 0 || !strings.Contains(r.stdout, "rebuilt "+path) || !strings.Contains(r.stdout, "previous store kept as "+path+".corrupt-") {
		t.Fatalf("rebuild of a store with damaged records:\n%s", r)
	}
	recs, code := listJSON(t, dataDir)
	if code != 0 || len(recs) != 4 {
		t.Fatalf("after the rebuild: exit %d, %d entries, want 4 records and no damage: %+v", code, len(recs), recs)
	}
	for _, e := range recs {
		if e.State == "damaged" {
			t.Errorf("still damaged after the rebuild: %+v", e)
		}
	}
	if e := recs[ips["ready-damaged"]]; e.ContainerID != "ready-damaged" || e.State != "committed" {
		t.Errorf("damaged address used by a READY sandbox: %+v, want it recorded for that sandbox", e)
	}
	if e := recs[ips["pending-ok"]]; e.ContainerID != "pending-ok" || e.State != "pending" {
		t.Errorf("the rebuild lost a healthy pending record: %+v", e)
	}
	// The damaged address no sandbox uses is still reserved: the rest of
	// the /28 (13 addresses, 4 held) is handed out, never it.
	for i := range 9 {
		if got := add(t, n, fmt.Sprintf("new-%d", i))[0]; got == ips["gone-damaged"] {
			t.Fatalf("ADD handed out %s, whose damaged record the rebuild kept reserved", got)
		}
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("the rebuild kept %d copies of the old store, want 1", len(aside))
	}
	// The operator archives the old store (a second rebuild within the same
	// second would otherwise want the same name).
	if err := os.Rename(aside[0], filepath.Join(t.TempDir(), "archived.db")); err != nil {
		t.Fatal(err)
	}

	// Healthy again: rebuild refuses without --force.
	if r := gcExec(t, "rebuild", "--data-dir", dataDir, "--network", "rb", "--cri-endpoint", cri.Endpoint()); r.code != 1 || !strings.Contains(r.stderr, "pass --force") {
		t.Errorf("rebuild of a healthy store:\n%s", r)
	}

	// --force on a logically damaged store.
	damageRecord(t, path, ips["ready-ok"], []byte("{not a record"))
	cri.Put(fakecri.Sandbox{ID: "notready", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY})
	r = gcExec(t, "rebuild", "--data-dir", dataDir, "--network", "rb", "--cri-endpoint", cri.Endpoint(), "--force")
	if r.code != 0 || !strings.Contains(r.stdout, "previous store kept as "+path+".corrupt-") {
		t.Fatalf("rebuild --force of a damaged store:\n%s", r)
	}
	recs, code = listJSON(t, dataDir)
	if code != 0 || recs[ips["ready-ok"]].ContainerID != "ready-ok" || recs[ips["ready-damaged"]].ContainerID != "ready-damaged" {
		t.Errorf("after rebuild --force: exit %d, %+v", code, recs)
	}
}

// zeroLeafType zeroes the page type of the allocs bucket's root page, as a
// torn or rotten page leaves it: bbolt opens the file, and panics on that
// page when a transaction reads it (store.ErrPageDamaged).
func zeroLeafType(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	_ = db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket([]byte("allocs")).Root())
		return nil
	})
	pageSize := db.Info().PageSize
	db.Close()
	if root == 0 {
		t.Fatal("allocs is an inline bucket: no page of its own to damage")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A page header: id (8 bytes), then flags (2 bytes): the page type.
	if _, err := f.WriteAt([]byte{0, 0}, int64(root)*int64(pageSize)+8); err != nil {
		t.Fatal(err)
	}
}

// A store whose records' page is damaged: list and status name the damage and
// how to repair it (exit 1), rebuild asks for --force (the plugin still serves
// from the readable pages), and rebuild --force sets it aside and rebuilds it
// from CRI.
func TestRebuildPageDamagedStore(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "pg", dataDir: dataDir, rangeSets: subnets("10.88.0.0/24")}
	var ready, all []netip.Addr
	for i := range 24 { // enough records for allocs to have a page of its own
		ip := add(t, n, fmt.Sprintf("sandbox-%02d", i))[0]
		all = append(all, ip)
		if i < 3 {
			ready = append(ready, ip)
		}
	}
	path := store.FilePath(dataDir, "pg")
	zeroLeafType(t, path)
	cri := startCRI(t)
	for i, ip := range ready {
		cri.Ready(fmt.Sprintf("sandbox-%02d", i), ip)
	}

	r := gcExec(t, "list", "--data-dir", dataDir)
	if r.code != exitFailed || !strings.Contains(r.stderr, "network pg") || !strings.Contains(r.stderr, "rebuild --network pg --force") {
		t.Errorf("list of a page-damaged store: want exit 1 naming the repair\n%s", r)
	}
	r = gcExec(t, "status", "--data-dir", dataDir)
	if r.code != exitFailed || !strings.Contains(r.stdout, "ERROR: ") || !strings.Contains(r.stdout, "rebuild --network pg --force") {
		t.Errorf("status of a page-damaged store: want an ERROR row naming the repair, exit 1\n%s", r)
	}
	before, _ := os.ReadFile(path)
	r = gcExec(t, "rebuild", "--data-dir", dataDir, "--network", "pg", "--cri-endpoint", cri.Endpoint())
	if r.code != exitFailed || !strings.Contains(r.stderr, "pass --force") {
		t.Errorf("rebuild of a page-damaged store without --force: want a refusal naming --force\n%s", r)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("a refused rebuild changed the store")
	}
	r = gcExec(t, "rebuild", "--data-dir", dataDir, "--network", "pg", "--cri-endpoint", cri.Endpoint(), "--force")
	if r.code != 0 || !strings.Contains(r.stdout, "rebuilt "+path) || !strings.Contains(r.stdout, ".corrupt-") {
		t.Fatalf("rebuild --force of a page-damaged store:\n%s", r)
	}
	recs, code := listJSON(t, dataDir)
	if code != 0 || len(recs) < 3 {
		t.Errorf("after rebuild --force: exit %d, %+v", code, recs)
	}
	for i, ip := range ready {
		if recs[ip].ContainerID != fmt.Sprintf("sandbox-%02d", i) {
			t.Errorf("after rebuild --force: %s = %+v", ip, recs[ip])
		}
	}
	// The other 21 sandboxes may still be starting (their ADDs succeeded, CRI
	// does not list them yet): the records' page is unreadable, so their
	// addresses stay reserved (the taken bitmap, on its own page, says which),
	// never free for the next ADD.
	for i, ip := range all[3:] {
		if _, ok := recs[ip]; !ok {
			t.Errorf("after rebuild --force: %s (sandbox-%02d, not listed by CRI) is free again", ip, i+3)
		}
	}
	if len(recs) != len(all) {
		t.Errorf("after rebuild --force: %d records, want the %d held before (the bitmap says which)", len(recs), len(all))
	}
	got := add(t, n, "after-rebuild")[0]
	if slices.Contains(all, got) {
		t.Errorf("ADD after rebuild --force returned %s, held before the damage", got)
	}
}

func TestRebuildRefusesReadableStore(t *testing.T) {
	f := newFixture(t)
	path := store.FilePath(f.dir, "alpha")
	before, _ := os.ReadFile(path)
	_, errOut, code := cli(t, "rebuild", "--data-dir", f.dir, "--network", "alpha", "--cri-endpoint", "unix:///nonexistent/cri.sock")
	if code != 1 || !strings.Contains(errOut, "is readable (3 records); pass --force") {
		t.Errorf("rebuild of a readable store: exit %d %q, want 1 asking for --force", code, errOut)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("a refused rebuild changed the store")
	}
	if m, _ := filepath.Glob(path + ".corrupt-*"); len(m) != 0 {
		t.Errorf("a refused rebuild set the store aside: %v", m)
	}

	// An unreadable store is not rebuilt without an answer from CRI.
	if err := os.Truncate(path, 8192); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, "rebuild", "--data-dir", f.dir, "--network", "alpha", "--cri-endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"))
	if code != 1 || !strings.Contains(errOut, "not rebuilding: ListPodSandbox") {
		t.Errorf("rebuild without CRI: exit %d %q", code, errOut)
	}
	if m, _ := filepath.Glob(path + ".corrupt-*"); len(m) != 0 {
		t.Errorf("a failed rebuild set the store aside: %v", m)
	}
	// list and status name the broken store instead of failing silently.
	if _, errOut, code := cli(t, "list", "--data-dir", f.dir); code != 1 || !strings.Contains(errOut, "network alpha") || !strings.Contains(errOut, "truncated") {
		t.Errorf("list with a truncated store: exit %d %q", code, errOut)
	}
	if err := os.Truncate(store.FilePath(f.dir, "beta"), 8192); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cli(t, "list", "--data-dir", f.dir); code != 1 || !strings.Contains(errOut, "network beta") || !strings.Contains(errOut, "2 store(s) could not be read") {
		t.Errorf("list with two truncated stores: exit %d %q, want both named and counted", code, errOut)
	}
	out, _, _ := cli(t, "status", "--data-dir", f.dir)
	if !strings.Contains(out, "alpha") || !strings.Contains(out, "ERROR: store unreadable") {
		t.Errorf("status with a truncated store:\n%s", out)
	}
}
