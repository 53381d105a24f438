package gcintegration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// An ADD that finds the pool full makes the daemon sweep at once (its
// interval here is an hour); the retried ADD succeeds.
func TestExhaustionKicksImmediateSweep(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	for i := range 4 {
		n.add(fmt.Sprintf("leak-%d", i))
	}
	d := n.startDaemon("--interval", "1h", "--max-reclaim-fraction", "1")
	eventually(t, "the start sweep", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "ok"))
		return v == 1, fmt.Sprintf("ok sweeps %v", v)
	})
	for id, r := range n.records() {
		if r.Obs.Misses != 1 {
			t.Fatalf("%s: %d misses after the start sweep, want 1", id, r.Obs.Misses)
		}
	}
	if p := n.pool(); p.Free != "0" {
		t.Fatalf("status %+v, want the pool full of leaks", p)
	}

	addStart := time.Now()
	o := n.tryAdd("new-0")
	failedAt := time.Now()
	if o.Err == nil || o.Err.Code != 100 || !strings.Contains(o.Err.Msg, "10.77.0.10-10.77.0.13") {
		t.Fatalf("ADD into a full pool: %s, want CNI error 100 naming the range set", o)
	}
	latency := eventually(t, "the kicked sweep reclaimed the 4 leaks", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 4, fmt.Sprintf("reclaims %v", v)
	})
	t.Logf("informational: exhaustion kick -> reclaimed in %s (kick file polled every 1s, interval 1h)", latency.Round(time.Millisecond))
	// With an hour between sweeps only the kick can have swept again: the
	// second sweep is triggered by the exhaustion, reclaims the 4 leaks, and
	// every reclaim is dated after the failed ADD began.
	m := d.scrape()
	if v := m.value(t, "hostlease_sweeps_total", lbl("result", "ok")); v != 2 {
		t.Errorf("%v ok sweeps, want 2 (start + one kick)", v)
	}
	checkReclaimedAfter(t, d, "start", 0, 4)
	if sw := d.logs.entries("sweep finished"); len(sw) != 2 || sw[1]["trigger"] != "exhaustion" || sw[1]["reclaimed"] != 4.0 {
		t.Errorf("daemon log: sweeps %v, want the start sweep and one triggered by the exhaustion reclaiming 4", sw)
	}
	for _, ev := range reclaimEvents(n.audit()) {
		if ev.Time.Before(addStart) {
			t.Errorf("reclaim of %s dated %s, before the exhausted ADD began (%s)", ev.IP, ev.Time, addStart)
		}
	}
	if v := m.value(t, "hostlease_allocation_failures_total", lbl("network", network, "range_set", "0", "reason", "exhausted")); v != 1 {
		t.Errorf("hostlease_allocation_failures_total{exhausted} = %v, want 1", v)
	}
	last := m.value(t, "hostlease_last_exhaustion_timestamp_seconds", lbl("network", network, "range_set", "0"))
	// The exhaustion is dated inside the failed ADD (to the gauge's float
	// precision: a microsecond either side).
	if at := time.Unix(0, int64(last*1e9)); at.Before(addStart.Add(-time.Microsecond)) || at.After(failedAt.Add(time.Microsecond)) {
		t.Errorf("hostlease_last_exhaustion_timestamp_seconds = %s, want between the failed ADD's start %s and end %s", at, addStart, failedAt)
	}
	if p := n.pool(); p.Exhaustions != 1 || p.Free != "4" {
		t.Errorf("status %+v, want 1 exhaustion and a free pool", p)
	}
	if ip := n.add("new-0"); !ip.IsValid() {
		t.Errorf("retried ADD got no address")
	}
}
