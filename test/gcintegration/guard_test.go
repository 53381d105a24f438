package gcintegration

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"maps"
	"slices"

	"github.com/hostlease/hostlease/pkg/reclaim"
)

// defaultGuard is the shipped --max-reclaim-fraction (the harness's base
// flags turn the guard off for the small nodes of the other tests).
var defaultGuard = []string{"--max-reclaim-fraction", strconv.FormatFloat(reclaim.DefaultMaxFraction, 'g', -1, 64)}

// A daemon pointed at the wrong runtime socket on a default node: the runtime
// answers, lists sandboxes, but none of ours, while 100 pods hold addresses of
// a /24. With the shipped guard it reclaims nothing, however many sweeps, and
// says so (metric, log).
func TestWrongSocketReclaimsNothing(t *testing.T) {
	t.Parallel()
	n := newNode(t, 240) // 10.77.0.10 - 10.77.0.249
	var mu sync.Mutex
	ips := map[string]netip.Addr{}
	var wg sync.WaitGroup
	for w := range 4 { // real plugin processes, a few at a time
		wg.Go(func() {
			for i := w; i < 100; i += 4 {
				id := fmt.Sprintf("pod-%03d", i)
				ip := n.add(id)
				mu.Lock()
				ips[id] = ip
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The wrong runtime: it answers, with its own sandboxes only.
	n.cri.Ready("someone-elses-sandbox", netip.MustParseAddr("192.168.200.7"))

	d := n.startDaemon(defaultGuard...)
	eventually(t, "the guard tripped on 3 sweeps", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_reclaim_guard_tripped_total", netLabel)
		return v >= 3, fmt.Sprintf("hostlease_reclaim_guard_tripped_total %v", v)
	})
	m := d.scrape()
	if v := m.sum("hostlease_reclaims_total", netLabel); v != 0 {
		t.Fatalf("%v live addresses reclaimed", v)
	}
	recs := n.records()
	if len(recs) != 100 {
		t.Fatalf("%d records left, want all 100", len(recs))
	}
	for id, ip := range ips {
		if r, ok := recs[id]; !ok || r.IP != ip {
			t.Fatalf("%s: record %+v, want %s", id, r, ip)
		}
	}
	if v := m.value(t, "hostlease_leak_candidates", netLabel); v != 100 {
		t.Errorf("hostlease_leak_candidates = %v, want 100", v)
	}
	logs := d.logs.entries("MASS-RECLAIM GUARD: refusing to reclaim without proof of death; a person must look (hostlease-gc leaks)")
	if len(logs) == 0 || logs[0]["level"] != "ERROR" || logs[0]["wouldReclaim"] != 100.0 || logs[0]["limit"] != 50.0 {
		t.Fatalf("guard log: %v, want an ERROR naming 100 addresses and the limit 50", logs)
	}
	if p := n.pool(); p.Used != 100 {
		t.Fatalf("status %+v, want 100 used", p)
	}
}

// On a small network the shipped guard still lets a lone leak go: one of two
// records.
func TestGuardLetsLoneLeakGo(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	live := n.add("live")
	n.cri.Ready("live", live)
	n.add("leak")
	d := n.startDaemon(defaultGuard...)
	eventually(t, "the lone leak reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 1, fmt.Sprintf("reclaims %v", v)
	})
	if v := d.scrape().value(t, "hostlease_reclaim_guard_tripped_total", netLabel); v != 0 {
		t.Errorf("guard tripped %v times for a lone leak", v)
	}
	if recs := n.records(); len(recs) != 1 || recs["live"].IP != live {
		t.Fatalf("records %v, want only the live one", recs)
	}
}

// Flags that would turn a safeguard off or make the daemon spin are refused
// at start: non-zero exit, a message naming the flag, no sweep.
func TestBadFlagsRefused(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	cases := []struct {
		flag, value string
	}{
		{"--max-reclaim-fraction", "NaN"},
		{"--max-reclaim-fraction", "+Inf"},
		{"--max-reclaim-fraction", "0"},
		{"--max-reclaim-fraction", "1.5"},
		{"--interval", "1ns"},
		{"--interval", "2h"},
		{"--misses", "0"},
		{"--grace", "-1s"},
		{"--min-age", "8760h"},
		{"--netns-grace", "-5m"},
	}
	for _, tc := range cases {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			args := append(n.baseFlags(), tc.flag, tc.value)
			_, stderr, code := gcCLI(t, args...)
			if code == 0 || !strings.Contains(stderr, tc.flag+" ") {
				t.Fatalf("exit %d, stderr %q: want a non-zero exit naming %s", code, stderr, tc.flag)
			}
		})
	}
	if lists, _, _ := n.cri.Counts(); lists != 0 {
		t.Fatalf("a refused daemon listed sandboxes %d times", lists)
	}
}

// More leaks at once than --max-reclaim-fraction of the pool: the daemon
// refuses, alerts and waits for a person. A restart with a higher limit
// reclaims them.
func TestMassReclaimGuard(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	for i := range 3 {
		n.add(fmt.Sprintf("leak-%d", i))
	}
	d := n.startDaemon("--max-reclaim-fraction", "0.25") // 3 > max(1, 0.25 * 3 records)
	eventually(t, "the guard tripped 3 times", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_reclaim_guard_tripped_total", netLabel)
		return v >= 3, fmt.Sprintf("hostlease_reclaim_guard_tripped_total %v", v)
	})
	m := d.scrape()
	trips := m.value(t, "hostlease_reclaim_guard_tripped_total", netLabel)
	if v := m.value(t, "hostlease_vetoes_total", lbl("network", network, "reason", "mass_reclaim_guard")); v != 3*trips {
		t.Errorf("hostlease_vetoes_total{mass_reclaim_guard} = %v, want 3 per trip (%v trips)", v, trips)
	}
	if v := m.sum("hostlease_reclaims_total", netLabel); v != 0 {
		t.Errorf("guard tripped but %v addresses were reclaimed", v)
	}
	if v := m.value(t, "hostlease_leak_candidates", netLabel); v != 3 {
		t.Errorf("hostlease_leak_candidates = %v, want 3", v)
	}
	recs := n.records()
	if len(recs) != 3 {
		t.Fatalf("records %v, want the 3 leaks kept", slices.Sorted(maps.Keys(recs)))
	}
	for id, r := range recs {
		if r.Obs.Verdict != "guarded" {
			t.Errorf("%s verdict %q, want guarded", id, r.Obs.Verdict)
		}
	}
	alerts := d.logs.entries("MASS-RECLAIM GUARD: refusing to reclaim without proof of death; a person must look (hostlease-gc leaks)")
	if len(alerts) == 0 || alerts[0]["level"] != "ERROR" || alerts[0]["wouldReclaim"] != 3.0 {
		t.Errorf("daemon log: %v, want an ERROR naming 3 addresses", alerts)
	}
	rows := n.leaksJSON("--misses", "2", "--grace", "0s", "--min-age", "0s", "--max-reclaim-fraction", "0.25")
	if len(rows) != 3 || rows[0].Reason != "guarded" || !strings.Contains(rows[0].Detail, "would reclaim 3 of the 3 records") {
		t.Errorf("hostlease-gc leaks: %v, want 3 rows explaining the guard", rows)
	}

	// The person looked and raises the limit.
	d.stopClean()
	d2 := n.startDaemon("--max-reclaim-fraction", "1") // 3 <= 1 * 3 records
	eventually(t, "the 3 leaks reclaimed after the restart", func() (bool, string) {
		v := reclaimsOf(d2.scrape(), "sandbox_absent")
		return v == 3, fmt.Sprintf("reclaims %v", v)
	})
	if v := d2.scrape().value(t, "hostlease_reclaim_guard_tripped_total", netLabel); v != 0 {
		t.Errorf("after raising the limit the guard still tripped %v times", v)
	}
	if p := n.pool(); p.Free != "8" {
		t.Errorf("status %+v, want the pool full", p)
	}
}
