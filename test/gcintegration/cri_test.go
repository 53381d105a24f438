package gcintegration

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// The runtime misbehaves: a CRI that fails, hangs, answers empty or restarts.

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
	if code, _, _ := d.Get("/readyz"); code != http.StatusServiceUnavailable {
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
	if code, _, _ := d.Get("/readyz"); code != http.StatusOK {
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
