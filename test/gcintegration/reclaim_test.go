package gcintegration

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

var netLabel = lbl("network", network)

func reclaimsOf(m metrics, reason string) float64 {
	return m.sum("hostlease_reclaims_total", lbl("network", network, "reason", reason))
}

// reclaimEvents are the audit log's reclaims, by sandbox.
func reclaimEvents(evs []allocator.AuditEvent) map[string]allocator.AuditEvent {
	out := map[string]allocator.AuditEvent{}
	for _, ev := range evs {
		if ev.Action == "reclaim" {
			out[ev.ContainerID] = ev
		}
	}
	return out
}

// A sandbox that the runtime never lists (its chain failed and the runtime
// forgot it) loses its address after --misses sweeps; the pool is full again,
// and the reclaim shows in the metrics, the audit log and the daemon's log.
func TestLeakedAddressesReclaimedAfterMisses(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	leaks := []string{"leak-0", "leak-1", "leak-2"}
	ips := map[string]netip.Addr{}
	for _, id := range leaks {
		ips[id] = n.add(id)
	}
	added := time.Now()
	if p := n.pool(); p.Size != "8" || p.Used != 3 || p.Free != "5" || p.Pending != 3 {
		t.Fatalf("before the daemon: status %+v, want size 8, used 3, free 5, pending 3", p)
	}

	d := n.startDaemon()
	eventually(t, "3 leaked addresses reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 3, fmt.Sprintf("hostlease_reclaims_total{reason=sandbox_absent} = %v", v)
	})
	observed := time.Since(added)

	if recs := n.records(); len(recs) != 0 {
		t.Errorf("after reclaim: list shows %d records, want none: %v", len(recs), recs)
	}
	if p := n.pool(); p.Size != "8" || p.Used != 0 || p.Free != "8" || p.Pending != 0 || p.LeakCandidates != 0 {
		t.Errorf("after reclaim: status %+v, want the pool full again (size 8, free 8)", p)
	}
	m := d.scrape()
	for metric, want := range map[string]float64{
		"hostlease_pool_size_addresses": 8,
		"hostlease_pool_free_addresses": 8,
	} {
		if v := m.value(t, metric, lbl("network", network, "range_set", "0")); v != want {
			t.Errorf("%s = %v, want %v", metric, v, want)
		}
	}
	if v := reclaimsOf(m, "netns_gone") + reclaimsOf(m, "manual"); v != 0 {
		t.Errorf("reclaims with reasons other than sandbox_absent: %v", v)
	}
	if v := m.value(t, "hostlease_leak_candidates", netLabel); v != 0 {
		t.Errorf("hostlease_leak_candidates = %v after reclaim, want 0", v)
	}
	if v := m.value(t, "hostlease_allocations", lbl("network", network, "state", "pending")); v != 0 {
		t.Errorf("hostlease_allocations{state=pending} = %v, want 0", v)
	}
	if v := m.value(t, "hostlease_cri_up", nil); v != 1 {
		t.Errorf("hostlease_cri_up = %v, want 1", v)
	}

	evs := reclaimEvents(n.audit())
	if len(evs) != 3 {
		t.Fatalf("audit log has %d reclaims, want 3: %+v", len(evs), evs)
	}
	for _, id := range leaks {
		ev, ok := evs[id]
		switch {
		case !ok:
			t.Errorf("audit log has no reclaim of %s", id)
		case ev.IP != ips[id] || ev.By != "hostlease-gc" || ev.Pod != "default/pod-"+id || ev.IfName != "eth0":
			t.Errorf("audit reclaim of %s: %+v, want ip %s by hostlease-gc for pod default/pod-%s", id, ev, ips[id], id)
		case !strings.HasPrefix(ev.Reason, "sandbox_absent: ") || !strings.Contains(ev.Reason, "for 2 sweeps"):
			t.Errorf("audit reclaim of %s: reason %q, want sandbox_absent after 2 sweeps", id, ev.Reason)
		}
	}
	// The start sweep is the first miss and reclaims nothing; the reclaims
	// come from a later sweep, as the daemon's log orders them.
	checkReclaimedAfter(t, d, "start", 0, 3)
	if ev, ok := evs[leaks[0]]; ok {
		t.Logf("timing: the reclaiming sweep ran %s after the daemon started (interval 200ms, misses 2); seen in the metrics %s after the last ADD",
			ev.Time.Sub(d.Started).Round(time.Millisecond), observed.Round(time.Millisecond))
	}
	logged := map[string]bool{}
	for _, e := range d.logs.entries("reclaimed address") {
		if e["reason"] == "sandbox_absent" && e["network"] == network {
			logged[fmt.Sprint(e["sandbox"])] = true
		}
	}
	for _, id := range leaks {
		if !logged[id] {
			t.Errorf("daemon log has no \"reclaimed address\" line for %s", id)
		}
	}
}

// Listed sandboxes keep their addresses over many sweeps: READY ones are
// live (a pending record whose sandbox is READY with that address becomes
// committed), NOTREADY ones are the runtime's to tear down.
func TestLiveAndStaleNeverReclaimed(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	ipPending := n.add("live-pending")
	ipCommitted := n.add("live-committed")
	n.commitMarker("live-committed")
	n.add("live-otherip")
	n.add("stale")
	n.add("leak")
	n.cri.Ready("live-pending", ipPending)
	n.cri.Ready("live-committed", ipCommitted)
	n.cri.Ready("live-otherip", netip.MustParseAddr("10.99.0.5")) // READY, but the runtime shows another address
	n.cri.NotReady("stale")
	before := n.records()
	if s := before["live-pending"].State; s != allocator.StatePending {
		t.Fatalf("live-pending is %s before the daemon ran, want pending", s)
	}
	if s := before["live-committed"].State; s != allocator.StateCommitted {
		t.Fatalf("live-committed is %s after the commit marker, want committed", s)
	}

	d := n.startDaemon()
	// The leak proves sweeps are reclaiming; the rest must survive many more.
	eventually(t, "the leak reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 1, fmt.Sprintf("reclaims %v", v)
	})
	s0 := d.scrape().sweeps()
	eventually(t, "10 more sweeps", func() (bool, string) {
		s := d.scrape().sweeps()
		return s >= s0+10, fmt.Sprintf("%v sweeps", s)
	})

	recs := n.records()
	if _, ok := recs["leak"]; ok || len(recs) != 4 {
		t.Fatalf("after 10+ sweeps: %d records %v, want the 4 listed sandboxes' only", len(recs), slices.Sorted(maps.Keys(recs)))
	}
	lp := recs["live-pending"]
	if lp.State != allocator.StateCommitted || lp.Committed.IsZero() || lp.IP != ipPending {
		t.Errorf("live-pending (READY with %s): %s committed=%v, want committed by the daemon", ipPending, lp.State, lp.Committed)
	}
	if r := recs["live-committed"]; r.State != allocator.StateCommitted || r.Obs.SandboxState != "READY" || r.Obs.Misses != 0 {
		t.Errorf("live-committed: state %s obs %+v, want committed, READY, no misses", r.State, r.Obs)
	}
	if r := recs["live-otherip"]; r.State != allocator.StatePending || r.Obs.Verdict != "live" {
		t.Errorf("live-otherip (READY, runtime shows another IP): state %s obs %+v, want kept pending as live", r.State, r.Obs)
	}
	if r := recs["stale"]; r.Obs.SandboxState != "NOTREADY" || r.Obs.Verdict != "stale" || r.Obs.Misses != 0 {
		t.Errorf("stale (NOTREADY): obs %+v, want NOTREADY/stale with no misses", r.Obs)
	}
	m := d.scrape()
	if v := m.sum("hostlease_reclaims_total", netLabel); v != 1 {
		t.Errorf("hostlease_reclaims_total = %v, want 1 (the leak only)", v)
	}
	if v := m.value(t, "hostlease_allocations", lbl("network", network, "state", "committed")); v != 2 {
		t.Errorf("hostlease_allocations{committed} = %v, want 2", v)
	}
	if v := m.value(t, "hostlease_allocations", lbl("network", network, "state", "pending")); v != 2 {
		t.Errorf("hostlease_allocations{pending} = %v, want 2 (other-IP and stale)", v)
	}
	if v := m.value(t, "hostlease_leak_candidates", netLabel); v != 0 {
		t.Errorf("hostlease_leak_candidates = %v, want 0", v)
	}
	if evs := reclaimEvents(n.audit()); len(evs) != 1 || !evs["leak"].IP.IsValid() {
		t.Errorf("audit reclaims %v, want only the leak's", evs)
	}
	if p := n.pool(); p.Used != 4 || p.Free != "4" || p.Pending != 2 {
		t.Errorf("status %+v, want used 4, free 4, pending 2", p)
	}
}

// An allocation younger than --min-age may belong to an ADD still in flight
// (invisible in CRI until it finishes): absent or not, it stays. Unless its
// netns is gone, which proves the runtime tore the sandbox down.
func TestInFlightAllocationKeptUntilMinAge(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	n.add("inflight")
	ipGone := n.add("torn-down")
	if err := os.Remove(n.netns("torn-down")); err != nil {
		t.Fatal(err)
	}
	d := n.startDaemon("--min-age", "30s")
	eventually(t, "the torn-down sandbox's address reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "netns_gone")
		return v == 1, fmt.Sprintf("reclaims{netns_gone} %v", v)
	})
	reclaimedAt := time.Now()
	s0 := d.scrape().sweeps()
	eventually(t, "8 more sweeps", func() (bool, string) {
		s := d.scrape().sweeps()
		return s >= s0+8, fmt.Sprintf("%v sweeps", s)
	})
	recs := n.records()
	r, ok := recs["inflight"]
	if !ok || len(recs) != 1 {
		t.Fatalf("records %v, want only inflight", slices.Sorted(maps.Keys(recs)))
	}
	// Misses stop counting at --misses; the absence keeps its start.
	if r.Obs.Misses != 2 || r.Obs.Verdict != "in_flight" || r.Obs.SandboxState != "absent" || !r.Obs.FirstMissed.Before(reclaimedAt) {
		t.Errorf("inflight obs %+v, want 2 misses (the --misses threshold) since before %s, absent, verdict in_flight", r.Obs, reclaimedAt)
	}
	m := d.scrape()
	if v := reclaimsOf(m, "sandbox_absent"); v != 0 {
		t.Errorf("hostlease_reclaims_total{sandbox_absent} = %v, want 0", v)
	}
	if v := m.value(t, "hostlease_leak_candidates", netLabel); v != 1 {
		t.Errorf("hostlease_leak_candidates = %v, want 1", v)
	}
	if ev := reclaimEvents(n.audit())["torn-down"]; ev.IP != ipGone || !strings.HasPrefix(ev.Reason, "netns_gone: ") {
		t.Errorf("audit reclaim of torn-down: %+v, want %s with reason netns_gone", ev, ipGone)
	}

	// The operator asks why it stays.
	policy := []string{"--misses", "2", "--grace", "0s", "--netns-grace", "0s"}
	rows := n.leaksJSON(append(policy, "--min-age", "30s")...)
	if len(rows) != 1 || rows[0].Sandbox != "inflight" || rows[0].Reason != "in_flight" || rows[0].Verdict != "keep" ||
		!strings.Contains(rows[0].Detail, "--min-age 30s") {
		t.Errorf("hostlease-gc leaks: %v, want inflight kept as in_flight, explaining --min-age 30s", rows)
	}
	out, _, code := gcCLI(t, "leaks", "--cri-endpoint", n.cri.Endpoint(), "--data-dir", n.dataDir, "--netns-dir", n.netnsDir,
		"--no-api", "--misses", "2", "--grace", "0s", "--min-age", "30s")
	if code != 0 || !strings.Contains(out, "inflight") || !strings.Contains(out, "an ADD may still be in flight") {
		t.Errorf("hostlease-gc leaks (table): exit %d\n%s", code, out)
	}
	// With a lower --min-age the same record would go: leaks tells the two apart.
	rows = n.leaksJSON(append(policy, "--min-age", "0s")...)
	if len(rows) != 1 || rows[0].Verdict != "reclaim" || rows[0].Reason != "sandbox_absent" {
		t.Errorf("hostlease-gc leaks --min-age 0s: %v, want inflight to be reclaimed as sandbox_absent", rows)
	}
	if _, ok := n.records()["inflight"]; !ok {
		t.Errorf("hostlease-gc leaks changed the store: inflight is gone")
	}
}

// --dry-run, how an operator first runs the daemon: it reports each address
// it would reclaim once the policy allows it, and changes nothing.
func TestDryRunReportsAndChangesNothing(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	ip := n.add("leak-0")
	d := n.startDaemon("--dry-run")
	eventually(t, "a would-reclaim report", func() (bool, string) {
		for _, e := range d.logs.entries("would reclaim address (dry run)") {
			if e["ip"] == ip.String() && e["sandbox"] == "leak-0" && e["reason"] == "sandbox_absent" {
				return true, ""
			}
		}
		return false, "no report yet"
	})
	s0 := d.scrape().sweeps()
	eventually(t, "3 more sweeps", func() (bool, string) {
		s := d.scrape().sweeps()
		return s >= s0+3, fmt.Sprintf("%v sweeps", s)
	})
	r, ok := n.records()["leak-0"]
	if !ok || r.Obs != (allocator.Observation{}) {
		t.Errorf("dry run: leak-0 present=%v with stored observation %+v, want it untouched", ok, r.Obs)
	}
	m := d.scrape()
	if v := m.sum("hostlease_reclaims_total", netLabel); v != 0 {
		t.Errorf("dry run: hostlease_reclaims_total = %v", v)
	}
	if v := m.value(t, "hostlease_leak_candidates", netLabel); v != 1 {
		t.Errorf("dry run: hostlease_leak_candidates = %v, want 1", v)
	}
	if evs := reclaimEvents(n.audit()); len(evs) != 0 {
		t.Errorf("dry run wrote reclaims to the audit log: %v", evs)
	}
	if len(d.logs.entries("reclaimed address")) != 0 {
		t.Errorf("dry run logged a real reclaim")
	}
	d.stopClean()
}

// checkReclaimedAfter checks, in the daemon's log, that the first sweep (its
// trigger given) finished having reclaimed firstReclaimed addresses and that
// all want "reclaimed address" lines come after that sweep's line.
func checkReclaimedAfter(t *testing.T, d *daemon, trigger string, firstReclaimed float64, want int) {
	t.Helper()
	first, reclaims := -1, 0
	for i, e := range d.logs.sequence() {
		switch e["msg"] {
		case "sweep finished":
			if first < 0 {
				first = i
				if e["trigger"] != trigger || e["reclaimed"] != firstReclaimed {
					t.Errorf("first sweep logged %v, want trigger %s having reclaimed %v", e, trigger, firstReclaimed)
				}
			}
		case "reclaimed address":
			if first < 0 {
				t.Errorf("reclaim %v logged before the first sweep finished", e)
			}
			reclaims++
		}
	}
	if first < 0 || reclaims != want {
		t.Errorf("daemon log: first sweep at line %d, %d reclaims, want a finished %s sweep then %d reclaims", first, reclaims, trigger, want)
	}
}
