package daemon

import (
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// An address a READY sandbox uses without a record is re-reserved for it in
// the store, and the allocator does not hand it out again; one recorded for a
// dead sandbox is taken over; one another READY sandbox holds is reported and
// left alone. PodSandboxStatus is asked once per sandbox.
func TestSweepReReservesUsedAddresses(t *testing.T) {
	e, ghostIP, stolenIP, conflictIP := newUsedAddresses(t)
	nr := e.net(e.sweepAt(t0))
	if len(nr.ReReserved) != 2 {
		t.Fatalf("re-reserved %+v, want 2", nr.ReReserved)
	}
	recs := e.records()
	if r := recs[ghostIP]; r == nil || r.ContainerID != "sb-ghost" || r.State != allocator.StateCommitted || r.PodName != "sb-ghost" {
		t.Fatalf("ghost's address: %+v", r)
	}
	if r := recs[stolenIP]; r == nil || r.ContainerID != "sb-thief" {
		t.Fatalf("address recorded for a dead sandbox: %+v", r)
	}
	if r := recs[conflictIP]; r == nil || r.ContainerID != "sb-holder" {
		t.Fatalf("conflicting address rewritten: %+v", r)
	}
	// The dead sandbox's late DEL releases nothing of the thief's.
	e.release("sb-dead", t0.Add(time.Second))
	if r := e.records()[stolenIP]; r == nil || r.ContainerID != "sb-thief" {
		t.Fatalf("the old owner's DEL released the re-reserved address: %+v", r)
	}
	// A following ADD does not get any address in use.
	got := e.alloc("sb-new", t0.Add(2*time.Second))
	if got.IP == ghostIP || got.IP == stolenIP || got.IP == conflictIP {
		t.Fatalf("ADD got %s, an address in use", got.IP)
	}
	statuses := e.cri.statuses.Load()
	e.sweepAt(t0.Add(time.Minute))
	// sb-ghost and sb-thief are named by records now; sb-twin's answer is
	// cached from the first sweep.
	if n := e.cri.statuses.Load() - statuses; n != 0 {
		t.Fatalf("second sweep asked PodSandboxStatus %d times, want 0", n)
	}
}
