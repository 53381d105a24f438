package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// cli runs hostlease-gc in-process and returns stdout, stderr and the exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := realMain(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// withStdin answers the confirmation prompt with s for the rest of the test.
func withStdin(t *testing.T, s string) {
	old := stdin
	stdin = strings.NewReader(s)
	t.Cleanup(func() { stdin = old })
}

// Two networks: "alpha" with one IPv4 range set of 11 addresses, "beta" with
// an IPv4 and an IPv6 range set (every sandbox gets one of each).
func netConf(dataDir, name string) []byte {
	sets := [][]map[string]string{{{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10", "rangeEnd": "10.1.0.20", "gateway": "10.1.0.1"}}}
	if name == "beta" {
		sets = [][]map[string]string{
			{{"subnet": "10.2.0.0/24", "rangeStart": "10.2.0.10", "rangeEnd": "10.2.0.20", "gateway": "10.2.0.1"}},
			{{"subnet": "fd00:77::/120", "rangeStart": "fd00:77::10", "rangeEnd": "fd00:77::20"}},
		}
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "type": "bridge",
		"ipam": map[string]any{"type": "hostlease", "dataDir": dataDir, "ranges": sets}})
	return b
}

// allocate does what the plugin's ADD does for sandbox id on network name.
func allocate(t *testing.T, dataDir, name, id string) []netip.Addr {
	t.Helper()
	c, err := netconf.Load(netConf(dataDir, name), "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.FilePath(dataDir, name), store.OpenOptions{Create: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var recs []*allocator.Record
	err = st.Update(func(tx *store.Tx) error {
		r, cerr := allocator.Allocate(tx, allocator.AllocateRequest{Network: name, RangeSets: c.RangeSets, Now: time.Now(),
			Owner: allocator.Owner{ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/cni-" + id[:8],
				PodNamespace: "default", PodName: "web-" + id[:4], PodUID: "uid-" + id[:8]}})
		if cerr != nil {
			return cerr
		}
		recs = r
		return nil
	})
	if err != nil {
		t.Fatalf("allocating for %s on %s: %v", id, name, err)
	}
	var ips []netip.Addr
	for _, r := range recs {
		ips = append(ips, r.IP)
	}
	return ips
}

// sandboxID makes a 64-hex-digit sandbox ID, as containerd's, from a word.
func sandboxID(word string) string {
	return (word + strings.Repeat("0", 64))[:64]
}

// fixture is a data dir with alpha holding three sandboxes and beta one.
type fixture struct {
	dir   string
	alpha map[string]netip.Addr   // sandbox -> address
	beta  map[string][]netip.Addr // sandbox -> addresses
	ids   map[string]string       // word -> sandbox ID
	recs  map[string]allocator.Record
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{dir: t.TempDir(), alpha: map[string]netip.Addr{}, beta: map[string][]netip.Addr{}, ids: map[string]string{}}
	for _, w := range []string{"aaaa1111", "bbbb2222", "cccc3333"} {
		f.ids[w] = sandboxID(w)
		f.alpha[f.ids[w]] = allocate(t, f.dir, "alpha", f.ids[w])[0]
	}
	f.ids["dddd4444"] = sandboxID("dddd4444")
	f.beta[f.ids["dddd4444"]] = allocate(t, f.dir, "beta", f.ids["dddd4444"])
	return f
}

func (f *fixture) records(t *testing.T, network string) map[netip.Addr]allocator.Record {
	t.Helper()
	args := []string{"list", "--data-dir", f.dir, "-o", "json"}
	if network != "" {
		args = append(args, "--network", network)
	}
	out, errOut, code := cli(t, args...)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	var recs []allocator.Record
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("list -o json is not JSON: %v\n%s", err, out)
	}
	m := map[netip.Addr]allocator.Record{}
	for _, r := range recs {
		m[r.IP] = r
	}
	return m
}

func auditOf(t *testing.T, path string) []allocator.AuditEvent {
	t.Helper()
	st, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var evs []allocator.AuditEvent
	if err := st.View(func(tx *store.Tx) (err error) {
		evs, err = tx.AuditLog(1000)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// assertAligned checks that every row of a table starts each column where its
// header does: tabwriter output, not ragged text.
func assertAligned(t *testing.T, out string, wantRows int) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != wantRows+1 {
		t.Fatalf("table has %d lines, want a header and %d rows:\n%s", len(lines), wantRows, out)
	}
	header := lines[0]
	var starts []int
	for i := range header {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	var cells [][]string
	for _, line := range lines[1:] {
		var row []string
		for c, p := range starts {
			if p >= len(line) || line[p] == ' ' || (p > 0 && line[p-1] != ' ') {
				t.Fatalf("column %d (%q) is not aligned in row %q:\n%s", c, strings.Fields(header)[c], line, out)
			}
			end := len(line)
			if c+1 < len(starts) {
				end = min(starts[c+1], len(line))
			}
			row = append(row, strings.TrimSpace(line[p:end]))
		}
		cells = append(cells, row)
	}
	return cells
}

func TestStatusTableAndJSON(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := cli(t, "status", "--data-dir", f.dir)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "NETWORK") || !strings.Contains(out, "RANGES") || !strings.Contains(out, "FREE") {
		t.Fatalf("status table header:\n%s", out)
	}
	rows := assertAligned(t, out, 3)
	want := [][]string{
		{"alpha", "0", "10.1.0.10-10.1.0.20", "11", "3", "8", "3", "0", "0", "0"},
		{"beta", "0", "10.2.0.10-10.2.0.20", "11", "1", "10", "1", "0", "0", "0"},
		{"beta", "1", "fd00:77::10-fd00:77::20", "17", "1", "16", "1", "0", "0", "0"},
	}
	for i, w := range want {
		if !slices.Equal(rows[i], w) {
			t.Errorf("status row %d = %q, want %q", i, rows[i], w)
		}
	}

	out, errOut, code = cli(t, "status", "--data-dir", f.dir, "-o", "json")
	if code != 0 {
		t.Fatalf("status -o json: exit %d: %s", code, errOut)
	}
	var pools []poolRow
	if err := json.Unmarshal([]byte(out), &pools); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
	}
	if len(pools) != 3 || pools[0].Network != "alpha" || pools[0].Size != "11" || pools[0].Used != 3 || pools[0].Free != "8" ||
		pools[2].Network != "beta" || pools[2].RangeSet != 1 || pools[2].Size != "17" || pools[2].Free != "16" {
		t.Errorf("status -o json: %+v", pools)
	}

	// An empty data dir says so instead of printing a bare header.
	empty := t.TempDir()
	if out, _, code := cli(t, "status", "--data-dir", empty); code != 0 || !strings.Contains(out, "no stores under "+empty) {
		t.Errorf("status of an empty dir: exit %d %q", code, out)
	}
	if out, _, code := cli(t, "status", "--data-dir", empty, "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("status -o json of an empty dir: exit %d %q, want []", code, out)
	}
}

func TestListTableAndJSON(t *testing.T) {
	f := newFixture(t)
	out, errOut, code := cli(t, "list", "--data-dir", f.dir)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	rows := assertAligned(t, out, 5) // 3 alpha + 2 beta addresses
	byIP := map[string][]string{}
	for _, r := range rows {
		byIP[r[1]] = r
	}
	id := f.ids["aaaa1111"]
	r := byIP[f.alpha[id].String()]
	if want := []string{"alpha", f.alpha[id].String(), "default/web-aaaa", id[:13], "eth0", "pending"}; r == nil || !slices.Equal(r[:6], want) {
		t.Errorf("list row for %s = %q, want it to start %q (sandbox ID shortened to 13)", f.alpha[id], r, want)
	}
	if r != nil && (!regexp.MustCompile(`^[0-9]+s$`).MatchString(r[6]) || r[7] != "-" || r[8] != "0") {
		t.Errorf("list row age/sandbox-state/misses = %q, want a fresh, never-swept record", r[6:])
	}

	recs := f.records(t, "")
	if len(recs) != 5 {
		t.Fatalf("list -o json: %d records, want 5", len(recs))
	}
	for sid, ip := range f.alpha {
		rec := recs[ip]
		if rec.ContainerID != sid || rec.Network != "alpha" || rec.State != allocator.StatePending || rec.PodUID != "uid-"+sid[:8] || rec.IfName != "eth0" {
			t.Errorf("list -o json record %s: %+v", ip, rec)
		}
	}
	if recs := f.records(t, "beta"); len(recs) != 2 {
		t.Errorf("list --network beta: %d records, want 2", len(recs))
	}
	if _, errOut, code := cli(t, "list", "--data-dir", f.dir, "--network", "gamma"); code != 1 || !strings.Contains(errOut, `no store for network "gamma"`) {
		t.Errorf("list --network gamma: exit %d %q, want 1 naming the missing network", code, errOut)
	}
}

func TestReleaseAsksForConfirmation(t *testing.T) {
	f := newFixture(t)
	id := f.ids["bbbb2222"]
	ip := f.alpha[id]

	for _, answer := range []string{"n\n", "\n", "", "nope\n"} {
		withStdin(t, answer)
		out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--network", "alpha", ip.String())
		if code == 0 || !strings.Contains(errOut, "not confirmed; nothing released") {
			t.Errorf("release answered %q: exit %d, stderr %q; want a refusal", answer, code, errOut)
		}
		if !strings.Contains(out, ip.String()+" held by pod default/web-bbbb, sandbox "+id) || !strings.Contains(out, "[y/N]") {
			t.Errorf("release did not show what it would release before asking:\n%s", out)
		}
		if _, ok := f.records(t, "alpha")[ip]; !ok {
			t.Fatalf("release answered %q released %s anyway", answer, ip)
		}
	}

	withStdin(t, "y\n")
	out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--network", "alpha", ip.String())
	if code != 0 || !strings.Contains(out, "released 1 address(es)") {
		t.Fatalf("release confirmed: exit %d\n%s%s", code, out, errOut)
	}
	recs := f.records(t, "alpha")
	if _, ok := recs[ip]; ok || len(recs) != 2 {
		t.Errorf("after release: %d records, %s still there: %v", len(recs), ip, recs)
	}
	var ev *allocator.AuditEvent
	for _, e := range auditOf(t, store.FilePath(f.dir, "alpha")) {
		if e.Action == "manual-release" {
			ev = &e
		}
	}
	if ev == nil || ev.IP != ip || ev.ContainerID != id || ev.By != "operator" || ev.Pod != "default/web-bbbb" {
		t.Errorf("audit log manual-release: %+v, want %s of %s by operator", ev, ip, id)
	}
}

// The usage line shows the IP before the flags; that order must work too.
func TestReleaseFlagsAfterIP(t *testing.T) {
	f := newFixture(t)
	ip := f.alpha[f.ids["aaaa1111"]]
	out, errOut, code := cli(t, "release", ip.String(), "--data-dir", f.dir, "--network", "alpha", "--yes")
	if code != 0 || !strings.Contains(out, "released 1 address(es)") {
		t.Fatalf("release IP --data-dir D --network N --yes: exit %d\n%s%s", code, out, errOut)
	}
	if _, ok := f.records(t, "alpha")[ip]; ok {
		t.Errorf("%s still allocated", ip)
	}
	if _, errOut, code := cli(t, "release", ip.String(), "10.1.0.11", "--data-dir", f.dir, "--yes"); code != 2 ||
		!strings.Contains(errOut, "exactly one of IP or --sandbox") {
		t.Errorf("release with two IPs: exit %d %q, want a usage error", code, errOut)
	}
}

func TestReleaseSandboxYes(t *testing.T) {
	f := newFixture(t)
	id := f.ids["dddd4444"]
	// --yes never reads stdin: a "n" there must not matter.
	withStdin(t, "n\n")
	out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--sandbox", id, "--yes")
	if code != 0 || !strings.Contains(out, "released 2 address(es)") || strings.Contains(out, "[y/N]") {
		t.Fatalf("release --sandbox --yes: exit %d\n%s%s", code, out, errOut)
	}
	for _, ip := range f.beta[id] {
		if !strings.Contains(out, "beta "+ip.String()+" held by") {
			t.Errorf("release did not list %s:\n%s", ip, out)
		}
	}
	if recs := f.records(t, "beta"); len(recs) != 0 {
		t.Errorf("beta still holds %v", recs)
	}
	if recs := f.records(t, "alpha"); len(recs) != 3 {
		t.Errorf("release --sandbox touched another sandbox: alpha holds %d", len(recs))
	}
	n := 0
	for _, e := range auditOf(t, store.FilePath(f.dir, "beta")) {
		if e.Action == "manual-release" && e.ContainerID == id {
			n++
		}
	}
	if n != 2 {
		t.Errorf("audit log has %d manual-release entries for %s, want 2", n, id)
	}
}

func TestReleaseUnknown(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--network", "alpha", "10.1.0.99"}, "no allocation found for 10.1.0.99"},
		{[]string{"--sandbox", "feedface"}, "no allocation found for sandbox feedface"},
		{[]string{"--network", "gamma", "10.1.0.10"}, `no store for network "gamma"`},
	} {
		args := append([]string{"release", "--data-dir", f.dir, "--yes"}, tc.args...)
		_, errOut, code := cli(t, args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want 1 with %q", tc.args, code, errOut, tc.want)
		}
	}
	if recs := f.records(t, ""); len(recs) != 5 {
		t.Errorf("a failed release changed the stores: %d records", len(recs))
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"status", "-o", "yaml"}, `-o must be table or json, got "yaml"`},
		{[]string{"list", "--data-dir", dir, "--output", "wide"}, `-o must be table or json, got "wide"`},
		{[]string{"leaks", "-o", "yaml"}, `-o must be table or json`},
		{[]string{"run", "--interval", "soon"}, `invalid value "soon" for flag -interval`},
		{[]string{"import", "--data-dir", dir}, "--network is required"},
		{[]string{"export", "--data-dir", dir}, "--network is required"},
		{[]string{"rebuild", "--data-dir", dir}, "--network is required"},
		{[]string{"release", "--data-dir", dir}, "give exactly one of IP or --sandbox ID"},
		{[]string{"release", "--data-dir", dir, "not-an-ip"}, `"not-an-ip" is not an IP address`},
		// A flag value that parses but is out of range is a usage error too.
		{[]string{"run", "--max-reclaim-fraction", "2", "--no-api"}, "--max-reclaim-fraction must be"},
		{[]string{"run", "--interval", "0s", "--no-api"}, "--interval must be"},
		{[]string{"leaks", "--misses", "0", "--no-api"}, "--misses must be"},
	} {
		_, errOut, code := cli(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "usage: hostlease-gc "+tc.args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q and the usage line", tc.args, code, errOut, tc.want)
		}
	}
}

func TestCommandsAndVersion(t *testing.T) {
	out, _, code := cli(t, "version")
	if want := fmt.Sprintf("hostlease-gc dev (%s)\n", runtime.Version()); code != 0 || out != want {
		t.Errorf("version: exit %d %q, want %q", code, out, want)
	}
	_, errOut, code := cli(t, "frobnicate")
	if code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) || !strings.Contains(errOut, "release") {
		t.Errorf("unknown command: exit %d %q, want 2 with the command list", code, errOut)
	}
	if _, errOut, code := cli(t); code != 2 || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no command: exit %d %q, want 2 with usage", code, errOut)
	}
	if _, errOut, code := cli(t, "--help"); code != 0 || !strings.Contains(errOut, "Commands:") {
		t.Errorf("--help: exit %d %q, want 0 with usage", code, errOut)
	}
	if _, errOut, code := cli(t, "list", "-h"); code != 0 || !strings.Contains(errOut, "-data-dir") {
		t.Errorf("list -h: exit %d %q, want 0 with the flags", code, errOut)
	}
}

// Migration from host-local and rollback: real host-local files are imported,
// an ADD continues host-local's round robin without reusing them, and export
// writes host-local's format back.
func TestImportExportRoundTrip(t *testing.T) {
	dataDir, hl, back := t.TempDir(), t.TempDir(), t.TempDir()
	src := filepath.Join(hl, "alpha")
	files := map[string]string{
		"10.1.0.11":          "sandbox-a\r\neth0",
		"10.1.0.12":          "sandbox-b", // before host-local recorded the ifname
		"last_reserved_ip.0": "10.1.0.12",
		"lock":               "",
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := cli(t, "import", "--data-dir", dataDir, "--network", "alpha", "--host-local-dir", hl)
	if code != 0 || !strings.Contains(out, "imported 2 reservation(s) from "+src) {
		t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
	}
	f := &fixture{dir: dataDir}
	recs := f.records(t, "alpha")
	a, b := recs[netip.MustParseAddr("10.1.0.11")], recs[netip.MustParseAddr("10.1.0.12")]
	if len(recs) != 2 || a.ContainerID != "sandbox-a" || a.IfName != "eth0" || b.ContainerID != "sandbox-b" || b.IfName != "" ||
		a.State != allocator.StateCommitted || a.Source != "host-local" {
		t.Fatalf("imported records: %+v", recs)
	}
	if out, _, code := cli(t, "import", "--data-dir", dataDir, "--network", "alpha", "--host-local-dir", hl); code != 0 || !strings.Contains(out, "imported 0 reservation(s)") {
		t.Errorf("a second import: exit %d %q, want nothing imported twice", code, out)
	}

	// The plugin's next ADD continues after host-local's last reservation.
	if ips := allocate(t, dataDir, "alpha", sandboxID("eeee5555")); ips[0] != netip.MustParseAddr("10.1.0.13") {
		t.Errorf("ADD after import got %s, want 10.1.0.13 (after host-local's last_reserved_ip 10.1.0.12)", ips[0])
	}

	out, errOut, code = cli(t, "export", "--data-dir", dataDir, "--network", "alpha", "--host-local-dir", back)
	if code != 0 || !strings.Contains(out, "exported 3 reservation(s) to "+filepath.Join(back, "alpha")) {
		t.Fatalf("export: exit %d\n%s%s", code, out, errOut)
	}
	want := map[string]string{
		"10.1.0.11":          "sandbox-a\r\neth0",
		"10.1.0.12":          "sandbox-b",
		"10.1.0.13":          sandboxID("eeee5555") + "\r\neth0",
		"last_reserved_ip.0": "10.1.0.13",
	}
	entries, err := os.ReadDir(filepath.Join(back, "alpha"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(back, "alpha", e.Name()))
		got[e.Name()] = string(b)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("exported host-local state:\n got %q\nwant %q", got, want)
	}

	if _, errOut, code := cli(t, "import", "--data-dir", dataDir, "--network", "beta", "--host-local-dir", hl); code != 1 || !strings.Contains(errOut, "no host-local state") {
		t.Errorf("import without host-local state: exit %d %q", code, errOut)
	}
	if _, errOut, code := cli(t, "export", "--data-dir", dataDir, "--network", "beta", "--host-local-dir", back); code != 1 || !strings.Contains(errOut, "beta.db") {
		t.Errorf("export without a store: exit %d %q", code, errOut)
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
