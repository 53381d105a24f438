package gcintegration

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// noProofRules make a reclaim without proof of death impossible within a
// test: whatever is reclaimed was reclaimed for its proof.
var noProofRules = []string{"--misses", "1000", "--grace", "24h", "--min-age", "24h"}

// fakeProc writes a /proc whose stat file says the node booted at boot.
func fakeProc(t *testing.T, boot time.Time) string {
	t.Helper()
	dir := t.TempDir()
	stat := fmt.Sprintf("cpu  1 2 3 4 5 6 7 0 0 0\nintr 1\nctxt 2\nbtime %d\nprocesses 3\n", boot.Unix())
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A node rebooted with a persistent data dir: the records of the previous
// boot whose sandboxes the runtime no longer lists are all reclaimed at once
// (not limited by the guard, no misses, grace or minimum age), the pods
// running again keep theirs, and a record written since the boot is not
// touched.
func TestRebootReclaimsStaleAtOnce(t *testing.T) {
	t.Parallel()
	n := newNode(t, 40)
	var stale []string
	for i := range 20 {
		id := fmt.Sprintf("before-%02d", i)
		n.add(id)
		stale = append(stale, id)
	}
	live := map[string]netip.Addr{}
	for i := range 3 {
		id := fmt.Sprintf("running-%d", i)
		live[id] = n.add(id)
		n.cri.Ready(id, live[id])
	}
	// The boot: every netns of the previous boot is gone (a tmpfs), the
	// runtime keeps its netns elsewhere now, and the kernel's btime is after
	// every record written so far.
	for _, id := range stale {
		if err := os.Remove(n.netns(id)); err != nil {
			t.Fatal(err)
		}
	}
	boot := time.Now().Truncate(time.Second).Add(time.Second)
	proc := fakeProc(t, boot)
	// btime has whole seconds: the clock must pass it before a record can
	// be dated after the boot (a wait for the wall clock, not for an event).
	for time.Now().Before(boot.Add(10 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond)
	}
	n.add("after-boot") // its sandbox is not listed either; no proof

	flags := append([]string{"--proc-dir", proc, "--netns-dir", filepath.Join(t.TempDir(), "elsewhere")}, noProofRules...)
	d := n.startDaemon(append(flags, defaultGuard...)...)
	eventually(t, "every record of the previous boot reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "predates_boot")
		return v == float64(len(stale)), fmt.Sprintf("reclaims{predates_boot} %v", v)
	})
	m := d.scrape()
	if v := m.sum("hostlease_reclaims_total", netLabel); v != float64(len(stale)) {
		t.Errorf("reclaims total %v, want %d", v, len(stale))
	}
	if v := m.value(t, "hostlease_reclaim_guard_tripped_total", netLabel); v != 0 {
		t.Errorf("guard tripped %v times on a reboot", v)
	}
	recs := n.records()
	if len(recs) != len(live)+1 {
		t.Fatalf("%d records left, want the %d running pods' and the one since the boot: %v", len(recs), len(live), recs)
	}
	for id, ip := range live {
		if recs[id].IP != ip {
			t.Errorf("running pod %s: %+v", id, recs[id])
		}
	}
	if _, ok := recs["after-boot"]; !ok {
		t.Error("a record written after the boot was reclaimed without proof")
	}
	audited := 0
	for _, ev := range reclaimEvents(n.audit()) {
		if strings.HasPrefix(ev.Reason, "predates_boot: ") {
			audited++
		}
	}
	if audited != len(stale) {
		t.Errorf("audit log: %d reclaims for predating the boot, want %d", audited, len(stale))
	}
}

// A leak whose netns the runtime removed is back in the pool at once: the
// removal wakes a sweep (the interval here is an hour and the rules without
// proof would wait a day), and that sweep reclaims it. A leak whose netns
// still exists is not touched.
func TestNetnsRemovalWakesReclaim(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	live := n.add("live")
	n.cri.Ready("live", live)
	n.add("leak")
	n.add("in-flight") // its ADD is still running: netns present, sandbox not listed

	d := n.startDaemon(append([]string{"--interval", "1h"}, noProofRules...)...)
	eventually(t, "the start-up sweep", func() (bool, string) {
		v := d.scrape().sweeps()
		return v == 1, fmt.Sprintf("sweeps %v", v)
	})
	if recs := n.records(); len(recs) != 3 {
		t.Fatalf("start-up sweep changed records: %v", recs)
	}
	// The runtime tears the failed sandbox down (after CNI DEL failed).
	if err := os.Remove(n.netns("leak")); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, "the leak reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "netns_gone")
		return v == 1, fmt.Sprintf("reclaims{netns_gone} %v", v)
	})
	t.Logf("informational: netns removed -> reclaim seen in /metrics after %s (debounce 100ms, polled every 25ms)", took)
	if v := d.scrape().sweeps(); v != 2 {
		t.Errorf("%v sweeps, want the start-up one and the one the removal woke", v)
	}
	woken := false
	for _, e := range d.logs.entries("sweep finished") {
		woken = woken || e["trigger"] == "netns_removed"
	}
	if !woken {
		t.Error("no sweep woken by the netns removal in the log")
	}
	recs := n.records()
	if _, ok := recs["leak"]; ok {
		t.Fatal("leak still recorded")
	}
	if recs["live"].IP != live {
		t.Fatalf("live record: %+v", recs["live"])
	}
	if _, ok := recs["in-flight"]; !ok {
		t.Fatal("a record whose netns exists was reclaimed")
	}
	// The address is free: the next ADD may have it.
	if p := n.pool(); p.Used != 2 {
		t.Fatalf("status %+v, want 2 used", p)
	}
}
