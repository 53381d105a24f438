//go:build linux

package daemon

import (
	"context"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// recv waits for one report (the deadline is a hang guard only).
func recv(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(hangGuard):
		t.Fatalf("hung: no report after %s", what)
	}
}

// The watch reports removed and moved-away entries, waits for a directory
// that does not exist yet, and follows one that is removed and made again.
func TestWatchNetnsDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "netns")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := WatchNetnsDir(ctx, dir, time.Millisecond, 10*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))

	// Not there yet: made later, then an entry removed.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ns := filepath.Join(dir, "cni-1")
	// Until the watch is set up a removal is not seen: repeat create+remove
	// until one is reported (what is asserted is that one is).
	deadline := time.Now().Add(hangGuard)
	for reported := false; !reported; {
		if err := os.WriteFile(ns, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(ns); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c:
			reported = true
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("hung: a removal in a directory made after the watch started was never reported")
			}
		}
	}

	// Created: no report. Moved away: a report.
	if err := os.WriteFile(ns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ns, filepath.Join(t.TempDir(), "elsewhere")); err != nil {
		t.Fatal(err)
	}
	recv(t, c, "an entry moved away")

	// A burst of removals: reported (at least once, at most one pending).
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, "b"+string(rune('0'+i))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := os.Remove(filepath.Join(dir, "b"+string(rune('0'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, c, "a burst of removals")

	// The directory removed and made again: removals in the new one count.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(hangGuard)
	for reported := false; !reported; {
		drain(c)
		if err := os.WriteFile(ns, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(ns); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c:
			reported = true
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("hung: after the directory was made again, removals were never reported")
			}
		}
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// A leak whose netns disappears is reclaimed by a sweep the removal wakes:
// with an hour between interval sweeps, the reclaim can only come from it.
func TestDaemonWakesOnNetnsRemoval(t *testing.T) {
	d, e, logs := newTestDaemon(t, func(o *Options) { o.Interval = time.Hour; o.NetnsGrace = 0 })
	live := e.allocNetns("sb-live", t0.Add(-time.Hour), e.touchNetns("cni-live"))
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	leakNs := e.touchNetns("cni-leak")
	leak := e.allocNetns("sb-leak", t0.Add(-time.Second), leakNs)
	stop := runDaemon(t, d)

	waitFor(t, "the start-up sweep", func() bool { return e.metric("hostlease_sweeps_total", "result", SweepOK) == 1 })
	if e.records()[leak.IP] == nil {
		t.Fatal("the start-up sweep reclaimed a record whose netns exists")
	}
	if err := os.Remove(leakNs); err != nil { // the runtime's teardown after a failed ADD
		t.Fatal(err)
	}
	waitFor(t, "the woken sweep to reclaim", func() bool { return e.reclaims(reclaim.ReleaseNetnsGone) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e.records()[leak.IP] != nil || e.records()[live.IP] == nil {
		t.Fatalf("store after the woken sweep: %v", e.records())
	}
	if n := e.cri.lists.Load(); n != 2 {
		t.Fatalf("%d sweeps, want the start-up one and the woken one", n)
	}
	if !regexpMatch(`msg="sweep finished" trigger=netns_removed`, logs.String()) {
		t.Fatalf("no woken sweep in the log:\n%s", logs.String())
	}
}
