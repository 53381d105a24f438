package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// status and list, as tables and as JSON, over the shared fixture.

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
		{"alpha", "0", "10.1.0.10-10.1.0.20", "11", "3", "8", "3", "0", "0", "0", "-"},
		{"beta", "0", "10.2.0.10-10.2.0.20", "11", "1", "10", "1", "0", "0", "0", "-"},
		{"beta", "1", "fd00:77::10-fd00:77::20", "17", "1", "16", "1", "0", "0", "0", "-"},
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
	pools, err := daemon.DecodeRows[daemon.PoolRow]([]byte(out))
	if err != nil {
		t.Fatalf("status -o json does not decode into its rows: %v\n%s", err, out)
	}
	if len(pools) != 3 || pools[0].Network != "alpha" || pools[0].Size != "11" || pools[0].Used != 3 || pools[0].Free != "8" ||
		pools[2].Network != "beta" || pools[2].RangeSet != 1 || pools[2].Size != "17" || pools[2].Free != "16" {
		t.Errorf("status -o json: %+v", pools)
	}

	// An empty data dir says so (on stderr, as every command's empty
	// result) instead of printing a bare header.
	empty := t.TempDir()
	if out, errOut, code := cli(t, "status", "--data-dir", empty); code != 0 || out != "" || !strings.Contains(errOut, "no stores found under "+empty) {
		t.Errorf("status of an empty dir: exit %d %q %q", code, out, errOut)
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
