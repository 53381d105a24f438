package gcintegration

import (
	"fmt"
	"maps"
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

// The daemon and the store file: a truncated store, and a store never held
// open between sweeps.

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
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Cmd.Process.Pid))
		if err != nil {
			t.Logf("cannot inspect the daemon's descriptors: %v", err)
			return
		}
		for _, fd := range fds {
			target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", d.Cmd.Process.Pid, fd.Name()))
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
