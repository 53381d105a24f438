package gcintegration

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
			ev.Time.Sub(d.started).Round(time.Millisecond), observed.Round(time.Millisecond))
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

// A CRI that fails, hangs past the daemon's timeout or answers an implausible
// empty list is not evidence of absence: nothing is reclaimed and no miss is
// counted; hostlease_sweeps_total{result="cri_error"} grows and
// hostlease_cri_up says whether the runtime answered at all.
func TestCRIUnusableReclaimsNothing(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	ipLive := n.add("live-0")
	n.commitMarker("live-0")
	n.add("leak-0")
	n.add("leak-1")
	n.cri.Ready("live-0", ipLive)

	var d *daemon
	intact := func(phase string) {
		t.Helper()
		recs := n.records()
		if len(recs) != 3 {
			t.Fatalf("%s: %d records %v, want all 3", phase, len(recs), slices.Sorted(maps.Keys(recs)))
		}
		for id, r := range recs {
			if r.Obs.Misses != 0 {
				t.Errorf("%s: %s counted %d misses; a CRI failure is not an absence", phase, id, r.Obs.Misses)
			}
		}
		if v := d.scrape().sum("hostlease_reclaims_total", netLabel); v != 0 {
			t.Errorf("%s: reclaims %v", phase, v)
		}
	}
	criErrors := func(d *daemon) float64 {
		return d.scrape().value(t, "hostlease_sweeps_total", lbl("result", "cri_error"))
	}

	// 1. ListPodSandbox fails.
	n.cri.SetMode(listFail)
	d = n.startDaemon()
	eventually(t, "3 failed sweeps", func() (bool, string) {
		v := criErrors(d)
		return v >= 3, fmt.Sprintf("cri_error sweeps %v", v)
	})
	m := d.scrape()
	if v := m.value(t, "hostlease_cri_up", nil); v != 0 {
		t.Errorf("list failing: hostlease_cri_up = %v, want 0", v)
	}
	if v := m.value(t, "hostlease_sweeps_total", lbl("result", "ok")); v != 0 {
		t.Errorf("list failing: %v ok sweeps", v)
	}
	if code, _, _ := d.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("list failing: /readyz %d, want 503 (no sweep has reached CRI)", code)
	}
	intact("list failing")
	if !logWhy(d, "ListPodSandbox: rpc error: code = Unavailable") {
		t.Errorf("daemon log does not say why nothing is reclaimed (Unavailable)")
	}

	// 2. An empty list while committed allocations exist.
	n.cri.SetMode(listEmpty)
	_, a0, _ := n.cri.Counts()
	c1 := criErrors(d)
	eventually(t, "3 sweeps with an empty list", func() (bool, string) {
		_, a, _ := n.cri.Counts()
		m := d.scrape()
		up, _ := m.get("hostlease_cri_up", nil)
		ce, _ := m.get("hostlease_sweeps_total", lbl("result", "cri_error"))
		return a >= a0+3 && up == 1 && ce >= c1+2, fmt.Sprintf("answered %d, cri_up %v, cri_error %v", a-a0, up, ce)
	})
	if v := d.scrape().value(t, "hostlease_sweeps_total", lbl("result", "ok")); v != 0 {
		t.Errorf("empty list: %v ok sweeps, want 0", v)
	}
	intact("empty list")
	if !logWhy(d, "no sandboxes while 1 committed allocations exist") {
		t.Errorf("daemon log does not say the empty list was refused")
	}

	// 3. ListPodSandbox hangs past the daemon's CRI timeout.
	n.cri.SetMode(listHang)
	eventually(t, "a sweep blocked in ListPodSandbox", func() (bool, string) {
		_, _, h := n.cri.Counts()
		return h == 1, fmt.Sprintf("%d hanging", h)
	})
	hangStart := time.Now()
	c3 := criErrors(d)
	// The daemon holds no store while it waits for CRI: an ADD and a DEL
	// both succeed, and both return while the sweep still waits (a store
	// held by the sweep would make them wait for the lock until the sweep
	// gave up on CRI, and fail with error 11 after the plugin's lockTimeout,
	// which is shorter than the daemon's CRI timeout).
	for _, verb := range []string{"ADD", "DEL"} {
		var o outcome
		if verb == "ADD" {
			o = n.tryAdd("during-hang")
		} else {
			o = n.del("during-hang")
		}
		if !o.OK() {
			t.Errorf("%s while the daemon waits on CRI: %s", verb, o)
		}
		if _, _, h := n.cri.Counts(); h != 1 || criErrors(d) != c3 {
			t.Errorf("%s returned after the hanging sweep was given up (%d ListPodSandbox calls hanging, cri_error sweeps %v, was %v): it waited for the daemon",
				verb, h, criErrors(d), c3)
		}
	}
	eventually(t, "the hanging sweep given up", func() (bool, string) {
		v := criErrors(d)
		return v >= c3+1, fmt.Sprintf("cri_error %v (was %v)", v, c3)
	})
	t.Logf("timing: a hanging ListPodSandbox was given up after %s", (time.Since(hangStart)).Round(100*time.Millisecond))
	if v := d.scrape().value(t, "hostlease_cri_up", nil); v != 0 {
		t.Errorf("list hanging: hostlease_cri_up = %v, want 0", v)
	}
	intact("list hanging")
	if !logWhy(d, "DeadlineExceeded") {
		t.Errorf("daemon log does not say the list timed out")
	}

	// 4. The runtime answers again: the leaks go, the live sandbox stays.
	n.cri.SetMode(listNormal)
	eventually(t, "the 2 leaks reclaimed once CRI answers", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 2, fmt.Sprintf("reclaims %v", v)
	})
	recs := n.records()
	if _, ok := recs["live-0"]; !ok || len(recs) != 1 {
		t.Errorf("after CRI recovered: records %v, want live-0 only", slices.Sorted(maps.Keys(recs)))
	}
	if v := d.scrape().value(t, "hostlease_cri_up", nil); v != 1 {
		t.Errorf("CRI recovered: hostlease_cri_up = %v, want 1", v)
	}
	if code, _, _ := d.get("/readyz"); code != http.StatusOK {
		t.Errorf("CRI recovered: /readyz %d, want 200", code)
	}
}

// The runtime restarts (its socket disappears for a while): sweeps fail and
// reclaim nothing meanwhile, and the daemon reconnects by itself once the
// runtime is back.
func TestCRIRestartRecovers(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	ipLive := n.add("live-0")
	n.commitMarker("live-0")
	n.cri.Ready("live-0", ipLive)
	d := n.startDaemon()
	eventually(t, "a first good sweep", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "ok"))
		return v >= 1, fmt.Sprintf("ok sweeps %v", v)
	})
	n.cri.Stop()
	n.add("leak-0") // a chain fails while the runtime is down
	c0, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "cri_error"))
	eventually(t, "3 failed sweeps with the runtime down", func() (bool, string) {
		m := d.scrape()
		ce, _ := m.get("hostlease_sweeps_total", lbl("result", "cri_error"))
		up, _ := m.get("hostlease_cri_up", nil)
		return ce >= c0+3 && up == 0, fmt.Sprintf("cri_error %v, cri_up %v", ce, up)
	})
	if recs := n.records(); len(recs) != 2 || recs["leak-0"].Obs.Misses != 0 {
		t.Fatalf("runtime down: records %+v, want both kept without misses", recs)
	}
	if err := n.cri.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	eventually(t, "the leak reclaimed after the runtime is back", func() (bool, string) {
		m := d.scrape()
		up, _ := m.get("hostlease_cri_up", nil)
		return reclaimsOf(m, "sandbox_absent") == 1 && up == 1, fmt.Sprintf("reclaims %v, cri_up %v", reclaimsOf(m, "sandbox_absent"), up)
	})
	t.Logf("timing: runtime back -> leak reclaimed in %s", time.Since(back).Round(time.Millisecond))
	if _, ok := n.records()["live-0"]; !ok {
		t.Errorf("live-0 lost its address across the runtime restart")
	}
}

// logWhy reports whether the daemon logged "reclaiming nothing" with a reason
// containing why.
func logWhy(d *daemon, why string) bool {
	for _, e := range d.logs.entries("reclaiming nothing this sweep: CRI answer not usable") {
		if strings.Contains(fmt.Sprint(e["why"]), why) {
			return true
		}
	}
	return false
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

// A truncated store: DEL still succeeds, ADD refuses to serve (try again
// later), the daemon sets the file aside once CRI answers completely and
// rebuilds it from the READY sandboxes, and the next ADD gets an address that
// no READY sandbox holds.
func TestTruncatedStoreSetAsideAndRebuilt(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	ready := map[string]netip.Addr{}
	for _, id := range []string{"ready-a", "ready-b", "ready-c"} {
		ready[id] = n.add(id)
		n.cri.Ready(id, ready[id])
	}
	ipGone := n.add("going")
	n.cri.Ready("going", ipGone)
	d := n.startDaemon()
	eventually(t, "the daemon commits the READY sandboxes", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_allocations", lbl("network", network, "state", "committed"))
		return v == 4, fmt.Sprintf("committed %v", v)
	})

	// The runtime goes away for a moment; meanwhile the store is cut short.
	n.cri.SetMode(listFail)
	c0, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "cri_error"))
	eventually(t, "a failed sweep", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "cri_error"))
		return v >= c0+1, fmt.Sprint(v)
	})
	if err := os.Truncate(n.storePath(), 8192); err != nil {
		t.Fatal(err)
	}
	if o := n.del("going"); !o.OK() {
		t.Errorf("DEL with a truncated store: %s, want exit 0", o)
	}
	n.cri.Remove("going")
	if o := n.tryAdd("new-0"); o.Err == nil || o.Err.Code != 11 {
		t.Errorf("ADD with a truncated store: %s, want CNI error 11 (try again later)", o)
	}
	if fi, err := os.Stat(n.storePath()); err != nil || fi.Size() != 8192 {
		t.Errorf("the truncated store was not left as evidence: %v %v", fi, err)
	}
	c1, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "cri_error"))
	eventually(t, "2 more failed sweeps", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_sweeps_total", lbl("result", "cri_error"))
		return v >= c1+2, fmt.Sprint(v)
	})
	if aside, _ := filepath.Glob(n.storePath() + ".corrupt-*"); len(aside) != 0 {
		t.Errorf("store rebuilt without a complete CRI answer: %v", aside)
	}

	n.cri.SetMode(listNormal)
	eventually(t, "the store rebuilt", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_stores_rebuilt_total", netLabel)
		return v == 1, fmt.Sprintf("hostlease_stores_rebuilt_total %v", v)
	})
	aside, _ := filepath.Glob(n.storePath() + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("set-aside stores %v, want one %s.corrupt-*", aside, filepath.Base(n.storePath()))
	}
	if fi, err := os.Stat(aside[0]); err != nil || fi.Size() != 8192 {
		t.Errorf("set-aside store %s: %v %v, want the truncated file", aside[0], fi, err)
	}
	recs := n.records()
	if len(recs) != 3 {
		t.Errorf("rebuilt store: records %v, want the 3 READY sandboxes", slices.Sorted(maps.Keys(recs)))
	}
	for id, ip := range ready {
		r, ok := recs[id]
		if !ok || r.IP != ip || r.State != allocator.StateCommitted || r.Source != "rebuild" || r.PodName != "pod-"+id || r.RangeSet != 0 {
			t.Errorf("rebuilt record of %s: %+v, want %s committed from rebuild", id, r, ip)
		}
	}
	if len(d.logs.entries("store was unreadable: set aside and rebuilt from CRI")) != 1 {
		t.Errorf("daemon log does not report the rebuild")
	}
	ip := n.add("new-0")
	for id, rip := range ready {
		if ip == rip {
			t.Errorf("ADD after the rebuild got %s, which READY sandbox %s holds", ip, id)
		}
	}
	if p := n.pool(); p.Size != "8" || p.Used != 4 {
		t.Errorf("status after rebuild and ADD: %+v, want size 8, used 4", p)
	}
}

// The daemon opens a store only inside a sweep: with an hour between sweeps,
// 200 ADD/DEL pairs run against it without waiting for its lock, and the
// daemon process holds no descriptor of the store.
func TestDaemonNeverHoldsStoreOpen(t *testing.T) {
	t.Parallel()
	n := newNode(t, 200)
	n.add("first")
	d := n.startDaemon("--interval", "1h")
	eventually(t, "the start sweep read the store", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_allocations", lbl("network", network, "state", "pending"))
		return v == 1, fmt.Sprintf("pending %v", v)
	})
	checkFDs := func() {
		t.Helper()
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
		if err != nil {
			t.Logf("cannot inspect the daemon's descriptors: %v", err)
			return
		}
		for _, fd := range fds {
			target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", d.cmd.Process.Pid, fd.Name()))
			if strings.HasPrefix(target, n.dataDir) {
				t.Errorf("the daemon holds %s open between sweeps (fd %s)", target, fd.Name())
			}
		}
	}
	checkFDs()

	// With an hour between sweeps the daemon sweeps nowhere during the
	// calls: they wait for no lock of the daemon's, so every one succeeds
	// (a lock held by the daemon would fail them with error 11).
	sweepsBefore := d.scrape().sweeps()
	const workers, pairs = 4, 50
	var mu sync.Mutex
	var elapsed []time.Duration
	var failures []string
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range pairs {
				mu.Lock()
				enough := len(failures) >= 5 // it is broken; do not wait out every lock timeout
				mu.Unlock()
				if enough {
					return
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				for _, o := range []outcome{n.tryAdd(id), n.del(id)} {
					mu.Lock()
					elapsed = append(elapsed, o.Elapsed)
					if !o.OK() {
						failures = append(failures, fmt.Sprintf("%s: %s", id, o))
					}
					mu.Unlock()
				}
				if i == pairs/2 && w == 0 {
					checkFDs() // between sweeps, with calls running
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d plugin calls failed, e.g.:\n%s",
			len(failures), len(elapsed), strings.Join(failures[:min(5, len(failures))], "\n"))
	}
	if s := d.scrape().sweeps(); s != sweepsBefore {
		t.Errorf("the daemon swept during the calls (%v sweeps, was %v); with --interval 1h nothing should trigger one", s, sweepsBefore)
	}
	if len(elapsed) != 2*workers*pairs {
		t.Fatalf("%d plugin calls ran, want %d", len(elapsed), 2*workers*pairs)
	}
	slices.Sort(elapsed)
	t.Logf("informational: %d plugin calls beside the daemon: p50 %s, p99 %s, max %s", len(elapsed),
		elapsed[len(elapsed)/2].Round(time.Millisecond), elapsed[len(elapsed)*99/100].Round(time.Millisecond), elapsed[len(elapsed)-1].Round(time.Millisecond))
	d.alive()
	checkFDs()
	if recs := n.records(); len(recs) != 1 {
		t.Errorf("after 200 ADD/DEL pairs: %d records, want only the first", len(recs))
	}
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
