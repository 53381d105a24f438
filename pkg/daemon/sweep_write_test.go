package daemon

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// How sweeps write: only what changed, only to the allocation they judged,
// in bounded transactions, and a cached decode that decides as a new daemon.

// The sweeper reads the stores before it lists CRI. An ADD that commits while
// the list is being taken (its sandbox may or may not be in the answer) is not
// in the snapshot, so this sweep cannot judge it absent.
func TestSweepRecordCommittedDuringCRIList(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sandbox listed=%v", listed), func(t *testing.T) {
			// The most eager policy: one miss, no grace, no minimum age.
			e := newSweepEnv(t, func(o *Options) { o.Misses, o.Grace, o.MinAge = 1, 0, 0 })
			live := e.alloc("sb-live", t0.Add(-time.Hour))
			e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
			e.sweepAt(t0)
			id := "sb-racing"
			var rec *allocator.Record
			e.cri.setOnList(func() {
				// The plugin took its timestamp before the daemon asked CRI,
				// and commits while CRI answers.
				rec = e.alloc(id, e.now.Add(-time.Second))
				if listed {
					e.cri.set(id, reclaim.SandboxReady, rec.IP)
				}
			})
			rep := e.sweepAt(e.now.Add(time.Minute))
			e.cri.setOnList(nil)
			if n := len(e.net(rep).Reclaimed); n != 0 {
				t.Fatalf("reclaimed %d addresses of an ADD that landed during the CRI list", n)
			}
			r := e.records()[rec.IP]
			if r == nil || r.ContainerID != id {
				t.Fatalf("record of the racing ADD: %+v", r)
			}
			if r.Obs != (allocator.Observation{}) {
				t.Fatalf("racing ADD's record was judged on a snapshot that did not hold it: %+v", r.Obs)
			}
		})
	}
}

// A record released and re-allocated between the sweep's snapshot and its
// write is a new allocation and must be left alone.
func TestSweepLeavesReallocatedAddress(t *testing.T) {
	for _, tc := range reallocations {
		t.Run(tc.name, func(t *testing.T) {
			e, rep, old := reallocated(t, tc.newID)
			nr := e.net(rep)
			var d reclaim.Decision
			for _, x := range nr.Verdict.Decisions {
				if x.Record.IP == old.IP {
					d = x
				}
			}
			if d.Action != reclaim.Release {
				t.Fatalf("precondition: the snapshot's record should be due (got %v %q)", d.Action, d.Reason)
			}
			if len(nr.Reclaimed) != 0 || nr.Err() != nil {
				t.Fatalf("reclaimed %v (err %v): the re-allocated address was released", nr.Reclaimed, nr.Err())
			}
			r := e.records()[old.IP]
			if r == nil || r.ContainerID != tc.newID || !r.Created.Equal(t0.Add(-time.Millisecond)) || r.State != allocator.StatePending {
				t.Fatalf("record now %+v, want the new allocation", r)
			}
			if r.Obs != (allocator.Observation{}) {
				t.Fatalf("the new allocation got the old one's observation: %+v", r.Obs)
			}
			if len(e.reclaimAudits()) != 0 {
				t.Fatalf("a reclaim was audited: %+v", e.reclaimAudits())
			}
		})
	}
}

func TestSweepCommitsPendingRecords(t *testing.T) {
	e, ready, other, notReady := newPendingRecords(t)
	now := t0
	rep := e.sweepAt(now)
	if got := e.net(rep).Committed; got != 1 {
		t.Fatalf("sweep committed %d, want 1", got)
	}
	recs := e.records()
	if r := recs[ready.IP]; r.State != allocator.StateCommitted || !r.Committed.Equal(now) || r.Obs.SandboxState != reclaim.SandboxReady {
		t.Fatalf("READY sandbox with the address: %+v, want committed at %v", r, now)
	}
	if r := recs[other.IP]; r.State != allocator.StatePending {
		t.Fatalf("READY sandbox without the address: state %s, want pending", r.State)
	}
	if r := recs[notReady.IP]; r.State != allocator.StatePending || r.Obs.SandboxState != reclaim.SandboxNotReady || r.Obs.Verdict != string(reclaim.KeepStale) {
		t.Fatalf("NOTREADY sandbox: %+v, want pending and stale", r)
	}
	// A committed record needs no status call on later sweeps.
	before := e.cri.statuses.Load()
	e.sweepAt(now.Add(time.Minute))
	if got := e.cri.statuses.Load() - before; got != 1 {
		t.Errorf("second sweep made %d PodSandboxStatus calls, want 1 (only the still-pending READY sandbox)", got)
	}
	if r := e.records()[ready.IP]; !r.Committed.Equal(now) {
		t.Errorf("commit time moved to %v", r.Committed)
	}
}

// Once nothing changes, a sweep writes nothing: no write transaction, so no
// exclusive lock and no fdatasyncs for plugin calls to wait behind.
func TestSweepThatChangesNothingWritesNothing(t *testing.T) {
	e := newSweepEnv(t)
	created := t0.Add(-time.Minute)
	live := e.alloc("sb-live", created)
	e.alloc("sb-otherip", created)
	e.alloc("sb-notready", created)
	e.alloc("sb-absent", created) // too young to reclaim for the whole test
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	e.cri.set("sb-otherip", reclaim.SandboxReady, addr("10.9.9.9"))
	e.cri.set("sb-notready", reclaim.SandboxNotReady)
	// --misses sweeps: the absent record's miss count grows to its cap.
	for i := range e.s.Opts.Misses {
		e.sweepAt(t0.Add(time.Duration(i) * time.Second))
	}
	before := fileBytes(t, e.path)
	for i := range 3 {
		rep := e.sweepAt(t0.Add(time.Duration(10+i) * time.Second))
		if rep.Result != SweepOK || len(e.net(rep).Verdict.Decisions) != 4 {
			t.Fatalf("sweep: %s, %d decisions", rep.Result, len(e.net(rep).Verdict.Decisions))
		}
		if !bytes.Equal(fileBytes(t, e.path), before) {
			t.Fatalf("steady sweep %d changed the store", i+1)
		}
	}
	// A new daemon (nothing cached) writes nothing either.
	e.s = &Sweeper{Opts: e.s.Opts, CRI: e.cri, Metrics: e.s.Metrics, Log: e.s.Log, Now: e.s.Now}
	e.sweepAt(t0.Add(20 * time.Second))
	if !bytes.Equal(fileBytes(t, e.path), before) {
		t.Fatal("a new daemon's first sweep over an up-to-date store changed it")
	}
	// A plugin's change is picked up by the next sweep.
	e.release("sb-live", t0.Add(21*time.Second))
	e.cri.remove("sb-live")
	e.sweepAt(t0.Add(22 * time.Second))
	if recs := e.records(); len(recs) != 3 {
		t.Fatalf("after a DEL: %d records, want 3", len(recs))
	}
}

// A sweep writes every change the policy reads at once, but rewrites at most
// MaxInfoWrites records only for what a person reads (verdict, sandbox
// state); the rest follow on the next sweeps. `hostlease-gc leaks` (the
// decisions) shows every verdict at once, `list` (the store) within a few
// sweeps.
func TestSweepBoundsInformationalWrites(t *testing.T) {
	e := newSweepEnv(t)
	e.s.infoWrites = 2
	created := t0.Add(-time.Minute)
	var listed []*allocator.Record
	for i := range 5 {
		id := fmt.Sprintf("sb-%d", i)
		listed = append(listed, e.alloc(id, created))
		e.cri.set(id, reclaim.SandboxReady, addr("10.9.9.9")) // READY with another address: stays pending
	}
	absent := e.alloc("sb-absent", created)
	countReady := func() int {
		n := 0
		for _, r := range e.records() {
			if r.Obs.SandboxState == reclaim.SandboxReady && r.Obs.Verdict == "live" {
				n++
			}
		}
		return n
	}
	for i, want := range []int{2, 4, 5, 5} {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Second))
		for _, d := range e.net(rep).Verdict.Decisions {
			if d.Record.IP != absent.IP && (d.Reason != "live" || d.Obs.SandboxState != reclaim.SandboxReady) {
				t.Fatalf("sweep %d decided %s: %q %+v, want live and READY", i+1, d.Record.IP, d.Reason, d.Obs)
			}
		}
		if got := countReady(); got != want {
			t.Fatalf("after sweep %d, %d records store READY/live, want %d", i+1, got, want)
		}
		if r := e.records()[absent.IP]; r.Obs.Misses != min(i+1, e.s.Opts.Misses) || r.Obs.SandboxState != reclaim.SandboxAbsent {
			t.Fatalf("sweep %d: absent record stored %+v, want miss %d (the policy's fields are never held back)", i+1, r.Obs, min(i+1, e.s.Opts.Misses))
		}
	}
	if snap, err := ReadSnapshot(e.path); err != nil || len(snap.Records) != 6 {
		t.Fatalf("ReadSnapshot: %v", err)
	} else if r := snap.Records[0]; r.IP != listed[0].IP || r.Obs.SandboxState != reclaim.SandboxReady {
		t.Fatalf("ReadSnapshot (hostlease-gc list) shows %+v", r)
	}
}

// The daemon's decode cache holds what it wrote without decoding it again:
// a long-running daemon decides exactly as a new one reading the same store.
func TestSweepCacheDecidesAsANewDaemon(t *testing.T) {
	e := newSweepEnv(t)
	created := t0.Add(-time.Hour)
	live := e.alloc("sb-live", created)
	pend := e.alloc("sb-pending", created)
	e.alloc("sb-notready", created)
	e.alloc("sb-gone", created)
	young := e.alloc("sb-young", t0)
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	e.cri.set("sb-pending", reclaim.SandboxReady, pend.IP)
	e.cri.set("sb-notready", reclaim.SandboxNotReady)
	e.cri.set("sb-young", reclaim.SandboxReady, young.IP)
	for i := range 8 {
		at := t0.Add(time.Duration(i) * time.Minute)
		switch i {
		case 2:
			e.cri.remove("sb-young") // goes absent
		case 4:
			e.cri.set("sb-young", reclaim.SandboxReady, young.IP) // back again
			// and a plugin touches a record
			e.update(func(tx *store.Tx) error {
				r, _ := tx.Get(live.IP)
				r.Netns = "/var/run/netns/moved"
				return tx.Put(r)
			})
		}
		o := *e.s.Opts
		o.DryRun = true
		fresh := &Sweeper{Opts: &o, CRI: e.cri, Kube: e.s.Kube, Log: e.s.Log, Now: e.s.Now}
		e.now = at
		want := e.net(fresh.Sweep(context.Background())).Verdict.Decisions
		got := e.net(e.sweepAt(at)).Verdict.Decisions
		if len(got) != len(want) {
			t.Fatalf("sweep %d: %d decisions, a new daemon %d", i+1, len(got), len(want))
		}
		for j := range got {
			g, w := got[j], want[j]
			if g.Action != w.Action || g.Reason != w.Reason || g.Detail != w.Detail || g.Obs != w.Obs || !reflect.DeepEqual(*g.Record, *w.Record) {
				t.Fatalf("sweep %d, %s: the running daemon decided %v %q %+v on %+v\na new daemon %v %q %+v on %+v",
					i+1, g.Record.IP, g.Action, g.Reason, g.Obs, *g.Record, w.Action, w.Reason, w.Obs, *w.Record)
			}
		}
	}
	if a := e.reclaimAudits(); len(a) != 1 || a[0].ContainerID != "sb-gone" {
		t.Fatalf("reclaims %+v, want the gone sandbox's", a)
	}
}

// A sweep whose every write finds its record changed since the snapshot (here
// released while CRI was being listed) commits nothing: the store is left
// byte for byte as the plugin left it (Store.Update rolls back a transaction
// that wrote nothing: no empty commit, no fdatasyncs).
func TestSweepCommitsNothingWhenAllChangedSince(t *testing.T) {
	e := newSweepEnv(t)
	e.alloc("sb-gone", t0.Add(-time.Hour)) // absent: its first miss is due
	var after []byte
	e.cri.setOnList(func() {
		e.release("sb-gone", t0)
		after = fileBytes(t, e.path)
	})
	rep := e.sweepAt(t0)
	e.cri.setOnList(nil)
	if d := e.net(rep).Verdict.Decisions; len(d) != 1 || d[0].Obs.Misses != 1 {
		t.Fatalf("precondition: the snapshot's record should get its first miss: %+v", d)
	}
	if rep.Result != SweepOK || e.net(rep).Err() != nil {
		t.Fatalf("sweep: %s %v", rep.Result, e.net(rep).Err())
	}
	if !bytes.Equal(fileBytes(t, e.path), after) {
		t.Fatal("the sweep committed a transaction that wrote nothing")
	}
	if len(e.records()) != 0 {
		t.Fatalf("records %v, want none", e.records())
	}
}
