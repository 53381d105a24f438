package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// sweepBenchRecords is the size of the benchmarked store: the target
// is a sweep over 10 000 records in under 100 ms plus the CRI call.
const sweepBenchRecords = 10000

// sweepBench is a data dir holding one store of sweepBenchRecords allocations:
// half of them live (READY sandboxes, committed, netns present), half absent
// (leak candidates too young to reclaim, netns gone), and a CRI that answers
// at once.
type sweepBench struct {
	dir, netnsDir string
	cri           *fakeCRI
	now           time.Time
}

func newSweepBench(b *testing.B) *sweepBench {
	b.Helper()
	sb := &sweepBench{dir: b.TempDir(), now: t0, cri: newFakeCRI()}
	sb.netnsDir = filepath.Join(sb.dir, "netns")
	if err := os.Mkdir(sb.netnsDir, 0o755); err != nil {
		b.Fatal(err)
	}
	sets := []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.0.0.0/16"), Start: netip.MustParseAddr("10.0.0.2"),
		End: netip.MustParseAddr("10.0.255.254"), Gateway: netip.MustParseAddr("10.0.0.1"),
	}}}}
	st, err := store.Open(store.FilePath(sb.dir, "bench"), store.OpenOptions{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	ip := netip.MustParseAddr("10.0.0.2")
	if err := st.Update(func(tx *store.Tx) error {
		if err := tx.SetNetwork("bench"); err != nil {
			return err
		}
		if err := tx.SetRangeSets(sets); err != nil {
			return err
		}
		for i := range sweepBenchRecords {
			id := fmt.Sprintf("%064x", i)
			r := &allocator.Record{IP: ip, PrefixLen: 16, Gateway: netip.MustParseAddr("10.0.0.1"), ContainerID: id, IfName: "eth0",
				Network: "bench", PodNamespace: "ns", PodName: fmt.Sprintf("pod-%d", i), PodUID: fmt.Sprintf("uid-%d", i),
				Netns: filepath.Join(sb.netnsDir, "cni-"+id[48:]), State: allocator.StateCommitted, Source: "add",
				Created: sb.now.Add(-time.Minute), Committed: sb.now.Add(-time.Minute)}
			if i%2 == 0 {
				sb.cri.set(id, reclaim.SandboxReady, ip)
				if err := os.WriteFile(r.Netns, nil, 0o644); err != nil {
					return err
				}
			}
			if err := tx.Put(r); err != nil {
				return err
			}
			ip = ip.Next()
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	return sb
}

// sweeper is a new daemon's Sweeper over the bench's data dir: nothing
// decoded yet.
func (sb *sweepBench) sweeper() *Sweeper {
	o := &Options{DataDir: sb.dir, Interval: 30 * time.Second, Misses: 3, Grace: 2 * time.Minute, MinAge: 5 * time.Minute,
		NetnsGrace: 30 * time.Second, MaxReclaimFraction: 0.5, NetnsDir: sb.netnsDir}
	return &Sweeper{Opts: o, CRI: sb.cri, Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return sb.now }}
}

// sweep runs one sweep and fails unless it judged every record and
// reclaimed nothing.
func (sb *sweepBench) sweep(b *testing.B, s *Sweeper) *SweepReport {
	// 1ms per sweep: the absent half never reaches the netns grace.
	sb.now = sb.now.Add(time.Millisecond)
	rep := s.Sweep(context.Background())
	if rep.Result != SweepOK || len(rep.Networks) != 1 || len(rep.Networks[0].Verdict.Decisions) != sweepBenchRecords || len(rep.Networks[0].Reclaimed) != 0 {
		b.Fatalf("sweep: result %s networks %d", rep.Result, len(rep.Networks))
	}
	return rep
}

// BenchmarkSweep10k measures one full sweep of a store holding 10 000
// allocations: half of them live (READY sandboxes, committed), half absent
// (leak candidates too young to reclaim), with netns paths to stat, against
// a CRI that answers at once. It is the daemon's steady-state cost on a very
// busy node.
func BenchmarkSweep10k(b *testing.B) {
	sb := newSweepBench(b)
	s := sb.sweeper()
	// Warm up to the steady state of a running daemon: the first --misses
	// sweeps legitimately rewrite every absent record (its miss count grows
	// until it is capped), the first few store the listed records' first
	// observation (MaxInfoWrites a sweep), and the first fills the decode
	// cache. From then on a sweep writes nothing.
	for range max(s.Opts.Misses, (sweepBenchRecords/2+reclaim.MaxInfoWrites-1)/reclaim.MaxInfoWrites) + 1 {
		sb.sweep(b, s)
	}
	path := store.FilePath(sb.dir, "bench")
	before, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	sb.sweep(b, s)
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		b.Fatalf("a steady-state sweep changed the store (%v)", err)
	}
	for b.Loop() {
		sb.sweep(b, s)
	}
}

// BenchmarkSweep10kCold measures the first sweep of a newly started daemon
// over a freshly written store of 10 000 allocations (as BenchmarkSweep10k's):
// every record is decoded (the decode cache is empty) and, in one write
// transaction, the absent half gets its first miss and MaxInfoWrites of the
// listed half their first observation (sandbox READY; see Writes). Each iteration starts from a copy of
// the store as written, made durable before the timer runs.
func BenchmarkSweep10kCold(b *testing.B) {
	sb := newSweepBench(b)
	path := store.FilePath(sb.dir, "bench")
	fresh, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	start := sb.now
	restore := func() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o600)
		if err == nil {
			_, err = f.Write(fresh)
			if err == nil {
				err = f.Sync() // the sweep's fdatasync must not flush the copy
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		sb.now = start
	}
	// The first sweep writes every absent record's first miss at once, and
	// the first observation of at most MaxInfoWrites listed records (it only
	// tells a person the sandbox is READY: later sweeps write the rest).
	sb.sweep(b, sb.sweeper())
	st, err := store.Open(path, store.OpenOptions{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	missed, ready := 0, 0
	err = st.View(func(tx *store.Tx) error {
		return tx.ForEach(func(r *allocator.Record) error {
			switch {
			case r.Obs.Misses == 1 && r.Obs.SandboxState == reclaim.SandboxAbsent:
				missed++
			case r.Obs.SandboxState == reclaim.SandboxReady:
				ready++
			}
			return nil
		})
	})
	st.Close()
	if want := min(sweepBenchRecords/2, reclaim.MaxInfoWrites); err != nil || missed != sweepBenchRecords/2 || ready != want {
		b.Fatalf("after the first sweep %d records carry their first miss and %d their READY observation, want %d and %d (%v)",
			missed, ready, sweepBenchRecords/2, want, err)
	}
	restore()
	for b.Loop() {
		s := sb.sweeper()
		rep := sb.sweep(b, s)
		b.StopTimer()
		if n := len(rep.Networks[0].Verdict.Decisions); n != sweepBenchRecords {
			b.Fatalf("cold sweep judged %d records", n)
		}
		restore()
		b.StartTimer()
	}
}

// BenchmarkSweep10kReadLock measures how long a steady-state sweep holds the
// store's shared lock (from opening the store to closing it: the read
// transaction that copies out what changed), which is how long a plugin
// arriving then waits. Decoding happens after the store is closed and is not
// part of it.
func BenchmarkSweep10kReadLock(b *testing.B) {
	sb := newSweepBench(b)
	s := sb.sweeper()
	for range max(s.Opts.Misses, (sweepBenchRecords/2+reclaim.MaxInfoWrites-1)/reclaim.MaxInfoWrites) + 1 {
		sb.sweep(b, s)
	}
	path := store.FilePath(sb.dir, "bench")
	cache := &s.stores[path].decoded
	for b.Loop() {
		_, scan, err := scanStore(path, cache, false, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := scan.Decode(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
