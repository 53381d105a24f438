package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
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
	recs, _, err := daemon.DecodeList([]byte(out))
	if err != nil {
		t.Fatalf("list -o json does not decode into its rows: %v\n%s", err, out)
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
