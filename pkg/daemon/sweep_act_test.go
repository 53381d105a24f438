package daemon

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// What sweeps write to the store and its audit log, by the reclaim rules.
// What they report for the same scenarios is in sweep_report_test.go.

func TestSweepReclaimsLeaksAfterMisses(t *testing.T) {
	s := newLeaks(t)
	e := s.e
	for i := range 2 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if rep.Result != SweepOK || !rep.CRI.Complete {
			t.Fatalf("sweep %d: result %s, CRI %+v", i+1, rep.Result, rep.CRI)
		}
		if n := len(e.net(rep).Reclaimed); n != 0 {
			t.Fatalf("sweep %d reclaimed %d addresses before --misses sweeps", i+1, n)
		}
		recs := e.records()
		for _, ip := range []netip.Addr{s.leakPod.IP, s.leakGone.IP} {
			r := recs[ip]
			if r == nil {
				t.Fatalf("sweep %d: leak %s gone early", i+1, ip)
			}
			if r.Obs.Misses != i+1 || r.Obs.SandboxState != reclaim.SandboxAbsent || !r.Obs.FirstMissed.Equal(t0) || r.Obs.Verdict != string(reclaim.KeepAbsent) {
				t.Fatalf("sweep %d: stored observation of %s = %+v, want %d misses since %v", i+1, ip, r.Obs, i+1, t0)
			}
			if !reclaim.IsLeakCandidate(r.Obs) {
				t.Fatalf("sweep %d: stored observation of %s is not a leak candidate (hostlease-gc status)", i+1, ip)
			}
		}
	}

	rep := e.sweepAt(t0.Add(2 * time.Minute)) // third miss, absent for the 2m grace
	nr := e.net(rep)
	if len(nr.Reclaimed) != 2 || nr.Err() != nil {
		t.Fatalf("third sweep reclaimed %d (err %v), want the 2 leaks; decisions %+v", len(nr.Reclaimed), nr.Err(), nr.Verdict.Decisions)
	}
	recs := e.records()
	if len(recs) != 1 || recs[s.live.IP] == nil {
		t.Fatalf("store after reclaim holds %v, want only the live %s", recs, s.live.IP)
	}
	if r := recs[s.live.IP]; r.State != allocator.StateCommitted || r.Obs.SandboxState != reclaim.SandboxReady || r.Obs.Misses != 0 {
		t.Fatalf("live record %+v, want committed and READY", r)
	}

	audits := e.reclaimAudits()
	if len(audits) != 2 {
		t.Fatalf("audit log has %d reclaims, want 2: %+v", len(audits), e.audit())
	}
	byIP := map[netip.Addr]allocator.AuditEvent{}
	for _, a := range audits {
		byIP[a.IP] = a
		if a.By != "hostlease-gc" || !strings.HasPrefix(a.Reason, string(reclaim.ReleaseSandboxAbsent)+": ") || !a.Time.Equal(t0.Add(2*time.Minute)) || a.IfName != "eth0" {
			t.Errorf("audit entry %+v: want by hostlease-gc, reason sandbox_absent with detail, time of the sweep", a)
		}
	}
	if a := byIP[s.leakPod.IP]; a.ContainerID != "web-0" || a.Pod != "default/web-0" {
		t.Errorf("audit entry for %s: %+v", s.leakPod.IP, a)
	}
	if a := byIP[s.leakGone.IP]; a.ContainerID != "job-1" || a.Pod != "default/job-1" {
		t.Errorf("audit entry for %s: %+v", s.leakGone.IP, a)
	}

	// Nothing is reclaimed twice; the freed addresses serve ADDs.
	if n := len(e.net(e.sweepAt(t0.Add(3 * time.Minute))).Reclaimed); n != 0 || len(e.reclaimAudits()) != 2 {
		t.Fatalf("after a further sweep: reclaimed %d, audits %d; want 0 and 2", n, len(e.reclaimAudits()))
	}
	e.alloc("web-0-retry", t0.Add(4*time.Minute), s.leakPod.IP)
}

func TestSweepNetnsGone(t *testing.T) {
	e := newSweepEnv(t)
	start := t0
	young := start.Add(-10 * time.Second)
	gone := e.allocNetns("sb-gone", young, filepath.Join(e.netns, "cni-gone"))
	present := filepath.Join(e.netns, "cni-present")
	if err := os.WriteFile(present, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inflight := e.allocNetns("sb-inflight", young, present)
	// A netns path outside --netns-dir proves nothing.
	outside := e.allocNetns("sb-outside", young, filepath.Join(t.TempDir(), "ns"))

	var reclaimedAt []int
	for i := range 10 { // every 15s for 2m15s: past --grace, well below --min-age
		rep := e.sweepAt(start.Add(time.Duration(i) * 15 * time.Second))
		for _, r := range e.net(rep).Reclaimed {
			if r.IP != gone.IP || r.Reason != reclaim.ReleaseNetnsGone {
				t.Fatalf("sweep %d reclaimed %s (%s) for %s; only %s's netns is provably gone", i, r.IP, r.ContainerID, r.Reason, gone.IP)
			}
			reclaimedAt = append(reclaimedAt, i)
		}
	}
	// Misses: sweep index 2 (3rd); netns grace 30s from the first miss: index 2.
	if len(reclaimedAt) != 1 || reclaimedAt[0] != 2 {
		t.Fatalf("netns-gone leak reclaimed at sweeps %v, want [2]", reclaimedAt)
	}
	recs := e.records()
	if recs[gone.IP] != nil || recs[inflight.IP] == nil || recs[outside.IP] == nil {
		t.Fatalf("store after sweeps: %v", recs)
	}
	if v := recs[inflight.IP].Obs.Verdict; v != string(reclaim.KeepInFlight) {
		t.Errorf("record with a present netns: verdict %q, want in_flight", v)
	}
	if a := e.reclaimAudits(); len(a) != 1 || !strings.HasPrefix(a[0].Reason, string(reclaim.ReleaseNetnsGone)+": ") {
		t.Errorf("audit %+v, want one netns_gone reclaim", a)
	}

	// Without the netns dir (a missing mount) no netns counts as gone.
	e2 := newSweepEnv(t, func(o *Options) { o.NetnsDir = filepath.Join(t.TempDir(), "not-mounted") })
	r := e2.allocNetns("sb-x", young, filepath.Join(e2.s.Opts.NetnsDir, "cni-x"))
	for i := range 8 {
		if rep := e2.sweepAt(start.Add(time.Duration(i) * 15 * time.Second)); len(e2.net(rep).Reclaimed) > 0 {
			t.Fatalf("sweep %d reclaimed %s although the netns dir is not visible", i, r.IP)
		}
	}
}

func TestSweepVetoKeepsAddressAPodShows(t *testing.T) {
	e, leak := newVetoed(t)
	for i := range 5 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if n := len(e.net(rep).Reclaimed); n != 0 {
			t.Fatalf("sweep %d reclaimed an address a running pod lists", i)
		}
	}
	r := e.records()[leak.IP]
	if r == nil || r.Obs.Verdict != string(reclaim.KeepVetoed) {
		t.Fatalf("vetoed record %+v, want kept with verdict vetoed", r)
	}
	if len(e.reclaimAudits()) != 0 {
		t.Fatalf("vetoed record: audits %+v", e.reclaimAudits())
	}

	// The pod completes: its address is no longer in use.
	e.addPod("web-0", "uid-web-0", "Succeeded", leak.IP)
	rep := e.sweepAt(t0.Add(5 * time.Minute))
	if n := len(e.net(rep).Reclaimed); n != 1 {
		t.Fatalf("after the pod terminated, reclaimed %d, want 1 (%+v)", n, e.net(rep).Verdict.Decisions)
	}
}

func TestSweepAPIUnavailableReclaimsNothing(t *testing.T) {
	e := newSweepEnv(t)
	leak := e.alloc("web-0", t0.Add(-time.Hour))
	e.failPodLists()
	for i := range 6 {
		if rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute)); len(e.net(rep).Reclaimed) != 0 {
			t.Fatalf("sweep %d reclaimed while the API server could not be read", i)
		}
	}
	if r := e.records()[leak.IP]; r == nil || r.Obs.Verdict != string(reclaim.KeepAPIUnavailable) {
		t.Fatalf("record %+v, want kept with verdict api_unavailable", r)
	}
	// Without an API server at all (--no-api) the same leak is reclaimed.
	e.s.Kube = nil
	if rep := e.sweepAt(t0.Add(6 * time.Minute)); len(e.net(rep).Reclaimed) != 1 {
		t.Fatalf("with --no-api the leak was not reclaimed")
	}
}

func TestSweepCRIFailureReclaimsNothing(t *testing.T) {
	s := newCRIOutage(t)
	e := s.e
	e.cri.setListErr(errOutage)
	for i := range 5 {
		rep := e.sweepAt(t0.Add(time.Duration(2+i) * time.Minute))
		if rep.Result != SweepCRIError || rep.CRI.Complete || len(e.net(rep).Reclaimed) != 0 {
			t.Fatalf("CRI down: result %s complete %v reclaimed %d", rep.Result, rep.CRI.Complete, len(e.net(rep).Reclaimed))
		}
	}
	if r := e.records()[s.leak.IP]; r == nil || r.Obs.Misses != 2 || r.Obs.Verdict != string(reclaim.KeepCRIUnavailable) {
		t.Fatalf("leak during a CRI outage: %+v, want kept with its 2 misses", r)
	}

	// The runtime restarts and briefly lists nothing: implausible while a
	// committed allocation exists, so still nothing is reclaimed.
	e.cri.setListErr(nil)
	e.cri.remove("sb-live")
	rep := e.sweepAt(t0.Add(10 * time.Minute))
	if rep.Result != SweepCRIError || len(e.net(rep).Reclaimed) != 0 || len(e.records()) != 2 {
		t.Fatalf("empty CRI list: result %s reclaimed %d", rep.Result, len(e.net(rep).Reclaimed))
	}

	e.cri.set("sb-live", reclaim.SandboxReady, s.live.IP)
	rep = e.sweepAt(t0.Add(11 * time.Minute))
	if rep.Result != SweepOK || len(e.net(rep).Reclaimed) != 1 || e.net(rep).Reclaimed[0].IP != s.leak.IP {
		t.Fatalf("first good sweep after the outage: result %s reclaimed %v, want the leak", rep.Result, e.net(rep).Reclaimed)
	}
}

func TestSweepDryRunChangesNothing(t *testing.T) {
	s := newDryRun(t)
	e := s.e
	before, badBefore := fileBytes(t, e.path), fileBytes(t, s.badPath)
	entriesBefore, _ := os.ReadDir(e.dir)

	var wouldAt []int
	for i := range 5 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		nr := e.net(rep)
		if len(nr.Reclaimed) != 0 || nr.Committed != 0 {
			t.Fatalf("dry-run sweep %d reclaimed %d, committed %d", i, len(nr.Reclaimed), nr.Committed)
		}
		for _, d := range nr.Verdict.Decisions {
			if d.Record.IP == s.leak.IP && d.Action == reclaim.Release {
				wouldAt = append(wouldAt, i)
			}
		}
	}
	// What a real daemon would do at sweep 3 is reported from then on.
	if len(wouldAt) == 0 || wouldAt[0] != 2 {
		t.Fatalf("dry run reported the leak as reclaimable at sweeps %v, want from sweep 2 (the third) on", wouldAt)
	}
	if !bytes.Equal(fileBytes(t, e.path), before) {
		t.Fatal("dry run modified the store")
	}
	if !bytes.Equal(fileBytes(t, s.badPath), badBefore) {
		t.Fatal("dry run modified the unreadable store")
	}
	if entries, _ := os.ReadDir(e.dir); len(entries) != len(entriesBefore) {
		t.Fatalf("dry run created or removed files: %v -> %v", entriesBefore, entries)
	}
}

// The mass-reclaim guard refuses the whole sweep and waits.
func TestSweepMassReclaimGuard(t *testing.T) {
	e, leaks := newGuarded(t)
	for i := range 3 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if len(e.net(rep).Reclaimed) != 0 {
			t.Fatalf("sweep %d reclaimed past the guard", i)
		}
	}
	nr := e.net(e.sweepAt(t0.Add(3 * time.Minute)))
	if !nr.Verdict.Guarded || nr.Verdict.WouldReclaim != 4 || nr.Verdict.GuardLimit != 3 || len(e.records()) != 10 {
		t.Fatalf("guard: %+v, %d records left", nr.Verdict, len(e.records()))
	}
	if r := e.records()[leaks[0].IP]; r.Obs.Verdict != string(reclaim.KeepGuarded) {
		t.Errorf("guarded record verdict %q", r.Obs.Verdict)
	}
	// One leak is released by hand; three are within the limit.
	e.release("job-0", t0.Add(4*time.Minute))
	if nr := e.net(e.sweepAt(t0.Add(5 * time.Minute))); nr.Verdict.Guarded || len(nr.Reclaimed) != 3 {
		t.Fatalf("at the limit: guarded %v reclaimed %d, want 3", nr.Verdict.Guarded, len(nr.Reclaimed))
	}
}

// A StatefulSet pod recreated under the same name (new UID, new address)
// does not protect its predecessor's leaked address.
func TestSweepStatefulSetNameReuse(t *testing.T) {
	e, old, replacement := newNameReuse(t)
	for i := range 3 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
	}
	recs := e.records()
	if recs[old.IP] != nil || recs[replacement.IP] == nil {
		t.Fatalf("after name reuse: store %v, want the old address reclaimed and the new one kept", keys(recs))
	}
}
