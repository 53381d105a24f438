package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// The scenarios below are set up once here and run by two tests each: one
// that checks what the sweep does to the store and its audit log
// (sweep_act_test.go, sweep_write_test.go), one that checks what it reports in
// Events and metrics (sweep_report_test.go).

// leaks is a node with a live sandbox and two leaks: one whose pod still
// exists (kubelet retries with a new sandbox) and one whose pod is gone.
// With --misses 3 and --grace 2m, sweeps at t0, t0+1m keep them and the
// sweep at t0+2m reclaims both.
type leaks struct {
	e                       *sweepEnv
	live, leakPod, leakGone *allocator.Record
}

func newLeaks(t *testing.T) *leaks {
	e := newSweepEnv(t, func(o *Options) { o.MaxReclaimFraction = 1 }) // 2 of 3 records leak
	created := t0.Add(-time.Hour)
	s := &leaks{e: e, live: e.alloc("sb-live", created), leakPod: e.alloc("web-0", created), leakGone: e.alloc("job-1", created)}
	e.cri.set("sb-live", reclaim.SandboxReady, s.live.IP)
	e.addPod("web-0", "uid-web-0", corev1.PodPending) // retrying: no address yet
	return s
}

// vetoed is a leak whose pod, running, still lists its address.
func newVetoed(t *testing.T) (*sweepEnv, *allocator.Record) {
	e := newSweepEnv(t)
	leak := e.alloc("web-0", t0.Add(-time.Hour))
	e.addPod("web-0", "uid-web-0", corev1.PodRunning, leak.IP)
	return e, leak
}

// criOutage is a leak and a live sandbox, swept twice (two misses), then a
// runtime that fails to list for five sweeps (t0+2m..t0+6m), lists nothing
// at t0+10m (implausible while a committed allocation exists) and is back at
// t0+11m: the leak is reclaimed then.
type criOutage struct {
	e          *sweepEnv
	leak, live *allocator.Record
}

func newCRIOutage(t *testing.T) *criOutage {
	e := newSweepEnv(t)
	s := &criOutage{e: e, leak: e.alloc("job-1", t0.Add(-time.Hour)), live: e.alloc("sb-live", t0.Add(-time.Hour))}
	e.cri.set("sb-live", reclaim.SandboxReady, s.live.IP)
	e.sweepAt(t0)
	e.sweepAt(t0.Add(time.Minute)) // two misses so far
	return s
}

// pendingRecords are three pending records: of a READY sandbox with the
// address, of a READY sandbox that reports another address, of a NOTREADY
// sandbox.
func newPendingRecords(t *testing.T) (e *sweepEnv, ready, other, notReady *allocator.Record) {
	e = newSweepEnv(t)
	at := t0.Add(-time.Minute)
	ready, other, notReady = e.alloc("sb-ready", at), e.alloc("sb-other", at), e.alloc("sb-notready", at)
	e.cri.set("sb-ready", reclaim.SandboxReady, addr("10.9.9.9"), ready.IP)
	e.cri.set("sb-other", reclaim.SandboxReady, addr("10.9.9.10"))
	e.cri.set("sb-notready", reclaim.SandboxNotReady, notReady.IP)
	return e, ready, other, notReady
}

// dryRun is a --dry-run daemon over a leak, a pending record of a READY
// sandbox and a second network whose store is unreadable.
type dryRun struct {
	e          *sweepEnv
	leak, pend *allocator.Record
	badPath    string
}

func newDryRun(t *testing.T) *dryRun {
	e := newSweepEnv(t, func(o *Options) { o.DryRun = true })
	created := t0.Add(-time.Hour)
	s := &dryRun{e: e, leak: e.alloc("job-1", created), pend: e.alloc("sb-ready", created), badPath: store.FilePath(e.dir, "broken")}
	e.cri.set("sb-ready", reclaim.SandboxReady, s.pend.IP)
	if err := os.WriteFile(s.badPath, bytes.Repeat([]byte("garbage!"), 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// guarded is 6 live records and 4 leaks with --max-reclaim-fraction 0.35:
// 10 records, a limit of 3. Sweeps at t0+2m and t0+3m trip the guard.
func newGuarded(t *testing.T) (*sweepEnv, []*allocator.Record) {
	e := newSweepEnv(t, func(o *Options) { o.MaxReclaimFraction = 0.35 })
	for i := range 6 {
		id := fmt.Sprintf("live-%d", i)
		e.cri.set(id, reclaim.SandboxReady, e.alloc(id, t0.Add(-time.Hour)).IP)
	}
	var leaks []*allocator.Record
	for i := range 4 {
		leaks = append(leaks, e.alloc(fmt.Sprintf("job-%d", i), t0.Add(-time.Hour)))
	}
	return e, leaks
}

// reallocated is a record due for a reclaim that its container releases, and
// tc's container re-allocates, while CRI is being listed; the sweep at t0.
func reallocated(t *testing.T, newID string) (*sweepEnv, *SweepReport, *allocator.Record) {
	e := newSweepEnv(t)
	old := e.alloc("sb-old", t0.Add(-time.Hour))
	// Due at the next sweep: two misses over five minutes already.
	e.update(func(tx *store.Tx) error {
		r, _ := tx.Get(old.IP)
		r.Obs = allocator.Observation{Misses: 2, FirstMissed: t0.Add(-5 * time.Minute), SandboxState: reclaim.SandboxAbsent}
		return tx.Put(r)
	})
	e.cri.setOnList(func() {
		e.release("sb-old", t0.Add(-time.Second))
		e.alloc(newID, t0.Add(-time.Millisecond), old.IP)
	})
	rep := e.sweepAt(t0)
	e.cri.setOnList(nil)
	return e, rep, old
}

// reallocations are the two ways an address is re-allocated.
var reallocations = []struct {
	name  string
	newID string // the container that re-allocates the address
}{
	{"another container", "sb-new"},
	{"the same container after DEL and ADD", "sb-old"},
}

// nameReuse is a StatefulSet pod web-0 whose first sandbox leaked its
// address, recreated under the same name with a new UID and address.
func newNameReuse(t *testing.T) (e *sweepEnv, old, replacement *allocator.Record) {
	e = newSweepEnv(t)
	old = e.alloc("web-0", t0.Add(-time.Hour)) // pod default/web-0, uid-web-0
	replacement = e.alloc("web-0-new", t0.Add(-10*time.Minute))
	e.cri.set("web-0-new", reclaim.SandboxReady, replacement.IP)
	e.addPod("web-0", "uid-web-0-replacement", corev1.PodRunning, replacement.IP)
	return e, old, replacement
}

// errOutage is a runtime that does not answer.
var errOutage = errors.New("rpc error: code = Unavailable")

// failPodLists makes the API server fail every pod list.
func (e *sweepEnv) failPodLists() {
	e.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
}

// usedAddresses are addresses READY sandboxes use that the store does not
// hold for them: one nobody recorded (ghost), one recorded for a dead sandbox
// (stolen), one recorded for another READY sandbox (conflict).
func newUsedAddresses(t *testing.T) (e *sweepEnv, ghostIP, stolenIP, conflictIP netip.Addr) {
	e = newSweepEnv(t)
	ghostIP, stolenIP, conflictIP = addr("10.1.0.10"), addr("10.1.0.11"), addr("10.1.0.12")
	e.cri.set("sb-ghost", reclaim.SandboxReady, ghostIP) // uses an address nobody recorded
	dead := e.alloc("sb-dead", t0.Add(-time.Hour), stolenIP)
	e.cri.set("sb-thief", reclaim.SandboxReady, dead.IP) // uses what a dead sandbox's record holds
	holder := e.alloc("sb-holder", t0.Add(-time.Hour), conflictIP)
	e.cri.set("sb-holder", reclaim.SandboxReady, holder.IP)
	e.cri.set("sb-twin", reclaim.SandboxReady, conflictIP) // claims what a READY sandbox holds
	return e, ghostIP, stolenIP, conflictIP
}
