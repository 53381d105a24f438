package gc

import (
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
)

// BenchmarkSweep10k measures one full sweep of a store holding 10 000
// allocations: half of them live (READY sandboxes, committed), half absent
// (leak candidates whose observation is rewritten every sweep but which are
// too young to reclaim), with netns paths to stat, against a CRI that answers
// at once. It is the daemon's steady-state cost on a very busy node.
func BenchmarkSweep10k(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	netnsDir := filepath.Join(dir, "netns")
	if err := os.Mkdir(netnsDir, 0o755); err != nil {
		b.Fatal(err)
	}
	sets := []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.0.0.0/16"), Start: netip.MustParseAddr("10.0.0.2"),
		End: netip.MustParseAddr("10.0.255.254"), Gateway: netip.MustParseAddr("10.0.0.1"),
	}}}}
	now := t0
	cri := newFakeCRI()
	st, err := allocator.Open(allocator.StorePath(dir, "bench"), allocator.OpenOptions{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	ip := netip.MustParseAddr("10.0.0.2")
	if err := st.Update(func(tx *allocator.Tx) error {
		if err := tx.SetNetwork("bench"); err != nil {
			return err
		}
		if err := tx.SetRangeSets(sets); err != nil {
			return err
		}
		for i := range n {
			id := fmt.Sprintf("%064x", i)
			r := &allocator.Record{IP: ip, PrefixLen: 16, Gateway: netip.MustParseAddr("10.0.0.1"), ContainerID: id, IfName: "eth0",
				Network: "bench", PodNamespace: "ns", PodName: fmt.Sprintf("pod-%d", i), PodUID: fmt.Sprintf("uid-%d", i),
				Netns: filepath.Join(netnsDir, "cni-"+id[48:]), State: allocator.StateCommitted, Source: "add",
				Created: now.Add(-time.Minute), Committed: now.Add(-time.Minute)}
			if i%2 == 0 {
				cri.set(id, SandboxReady, ip)
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
	st.Close()

	o := &Options{DataDir: dir, Interval: 30 * time.Second, Misses: 3, Grace: 2 * time.Minute, MinAge: 5 * time.Minute,
		NetnsGrace: 30 * time.Second, MaxReclaimFraction: 0.5, NetnsDir: netnsDir}
	s := &Sweeper{Opts: o, CRI: cri, Metrics: NewMetrics(prometheus.NewRegistry()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	ctx := context.Background()
	sweep := func() *SweepReport {
		// 1ms per sweep: the absent half never reaches the netns grace.
		now = now.Add(time.Millisecond)
		rep := s.Sweep(ctx)
		if rep.Result != SweepOK || len(rep.Networks) != 1 || len(rep.Networks[0].Verdict.Decisions) != n || len(rep.Networks[0].Reclaimed) != 0 {
			b.Fatalf("sweep: result %s networks %d", rep.Result, len(rep.Networks))
		}
		return rep
	}
	// Warm up to the steady state of a running daemon: the first --misses
	// sweeps legitimately rewrite every absent record (its miss count grows
	// until it is capped) and fill the decode cache.
	for range o.Misses + 1 {
		sweep()
	}
	for b.Loop() {
		sweep()
	}
}
