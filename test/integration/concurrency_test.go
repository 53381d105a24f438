package integration

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/leasecheck"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// holdings books every holding of every address (leasecheck judges the
// duplicates) and counts how many containers hold addresses at once.
type holdings struct {
	book    *leasecheck.Book
	mu      sync.Mutex
	maxLive int
	live    int
	// held is what each container was seen to hold, for the audit log.
	held map[string][]netip.Addr
}

func newHoldings() *holdings {
	return &holdings{book: leasecheck.NewBook(), held: map[string][]netip.Addr{}}
}

// add books the addresses an ADD returned.
func (h *holdings) add(id string, ips []netip.Addr, start, done time.Time) *leasecheck.Holding {
	hd := &leasecheck.Holding{Owner: id, AddStart: start, AddDone: done}
	h.book.Hold(hd, ips...)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[id] = append(h.held[id], ips...)
	h.live++
	h.maxLive = max(h.maxLive, h.live)
	return hd
}

// releasing marks the moment the holder's DEL process starts.
func (h *holdings) releasing(hd *leasecheck.Holding) {
	h.book.Releasing(hd)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live--
}

// duplicates lists every pair of holdings of one address that certainly
// overlapped.
func (h *holdings) duplicates() []string {
	var out []string
	for _, d := range h.book.Duplicates() {
		x, y := d.A, d.B
		out = append(out, fmt.Sprintf("%s held by %s (ADD returned %s, DEL started %s) and %s (ADD %s..%s) at once",
			d.IP, x.Owner, x.AddDone.Format(time.StampMicro), stamp(x.DelStart), y.Owner, y.AddStart.Format(time.StampMicro), y.AddDone.Format(time.StampMicro)))
	}
	return out
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.StampMicro)
}

// latencies collects per-call wall times.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return "no calls"
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))].Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v", q(.5), q(.9), q(.99), s[len(s)-1].Round(time.Millisecond))
}

// TestConcurrentProcesses runs 32 hostlease processes at a time against one
// small pool (a /26: 61 allocatable addresses) for thousands of ADD/DEL
// calls. Addresses are held for a while, so that round-robin comes back to
// held addresses again and again: twelve workers keep their first container
// for the whole run, every other worker keeps each container across its next
// ADD, the rest DEL at once (at most 60 addresses held at once). It
// guarantees:
//   - no address is held by two containers at once: every holding is timed
//     from the ADD and DEL processes' start and exit, and two holdings of one
//     address are a duplicate when both ADDs had returned before either DEL
//     started (internal/testing/leasecheck);
//   - every call exits 0 with a well-formed result: no exhaustion, no lock
//     timeout (error 11) under the default lockTimeout, no other error (how
//     long the lock waits take is measured by test/bench, not asserted here);
//   - afterwards the store opens, holds no record, its owners index is empty
//     (raw bbolt walk, and ByOwner for every container ID used), bbolt's page
//     check is clean;
//   - the audit log holds exactly what its bound says for the number of
//     releases made (the count is not a multiple of the prune batch), and
//     every release in it names a container and an address that container
//     was seen to hold, each once.
//
// The dual-stack variant (a /26 and a /122 in two range sets) additionally
// guarantees each ADD gets exactly one address per family.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 5000-call process storm")
	}
	t.Run("ipv4", func(t *testing.T) {
		storm(t, "conc4", 32, 5000, []string{"10.90.0.0/26"})
	})
	t.Run("dualstack", func(t *testing.T) {
		storm(t, "conc46", 32, 640, []string{"10.90.1.0/26", "fd00:90::/122"})
	})
}

// auditEntries is how many entries the audit log may keep after n appends:
// all of them below auditLimit+auditPrune; past that, the store drops its
// audit bucket's oldest entries auditPrune or more at a time down to
// auditLimit, and the newest wait in the queue (a quarter page: fewer than
// queueMax of these entries) before they move there.
func auditEntries(n int) (lo, hi int) {
	const auditLimit, auditPrune, queueMax = 2048, 64, 32
	if n < auditLimit+auditPrune {
		return n, n
	}
	return auditLimit, auditLimit + auditPrune - 1 + queueMax
}

// storm runs workers processes in parallel until calls ADD+DEL calls were made.
func storm(t *testing.T, network string, workers, calls int, subnets []string) {
	dir := t.TempDir()
	conf := ipamConf(t, network, dir, subnets...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	hold := newHoldings()
	var errs errorList
	var lat latencies
	var cycles, releases atomic.Int64
	var ids sync.Map
	perWorker := calls / 2 / workers
	if perWorker*2*workers < calls {
		perWorker++
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// A keeper holds each container until its next ADD has returned;
			// a long holder keeps its first container until its last cycle.
			keeper, longHolder := w%2 == 0, w < 12
			type held struct {
				base call
				ips  []netip.Addr
				hd   *leasecheck.Holding
			}
			var prev, long *held
			release := func(h *held) {
				hold.releasing(h.hd)
				del := h.base
				del.Command = "DEL"
				o := runPlugin(ctx, del, conf)
				lat.add(o.Elapsed)
				if !o.OK() {
					errs.add("DEL %s: %v", h.base.ContainerID, o)
					return
				}
				releases.Add(int64(len(h.ips)))
				cycles.Add(1)
			}
			for i := range perWorker {
				if ctx.Err() != nil {
					errs.add("worker %d: deadline reached after %d cycles", w, i)
					break
				}
				id := fmt.Sprintf("%s-w%02d-%05d", network, w, i)
				ids.Store(id, true)
				base := call{ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id,
					Args: podArgs("conc", id, fmt.Sprintf("uid-%d-%d", w, i), id)}
				add := base
				add.Command = "ADD"
				addStart := time.Now()
				o := runPlugin(ctx, add, conf)
				addDone := time.Now()
				lat.add(o.Elapsed)
				var cur *held
				if !o.OK() {
					errs.add("ADD %s: %v", id, o)
				} else {
					prefixes, err := resultIPs(o.Stdout)
					if err != nil || len(prefixes) != len(subnets) {
						errs.add("ADD %s: want %d addresses, got %v (%v)", id, len(subnets), prefixes, err)
					}
					var ips []netip.Addr
					fams := map[bool]int{}
					for _, p := range prefixes {
						ips = append(ips, p.Addr())
						fams[p.Addr().Is4()]++
					}
					if len(subnets) == 2 && (fams[true] != 1 || fams[false] != 1) {
						errs.add("ADD %s: want one IPv4 and one IPv6 address, got %v", id, prefixes)
					}
					cur = &held{base: base, ips: ips, hd: hold.add(id, ips, addStart, addDone)}
				}
				if prev != nil {
					release(prev)
					prev = nil
				}
				if cur == nil {
					continue
				}
				if longHolder && long == nil {
					long = cur
					continue
				}
				if keeper {
					prev = cur
				} else {
					release(cur)
				}
			}
			for _, h := range []*held{prev, long} {
				if h != nil {
					release(h)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := int(cycles.Load()) * 2
	t.Logf("%s: %d workers, %d ADD/DEL calls (%d full cycles) in %v = %.0f calls/s; max held at once %d; per-call latency %s",
		network, workers, n, cycles.Load(), elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), hold.maxLive, lat.summary())
	if dups := hold.duplicates(); len(dups) > 0 {
		var d errorList
		for _, s := range dups {
			d.add("%s", s)
		}
		d.report(t, "addresses held by two containers at once")
	}
	// Every call succeeded: none waited out the default lockTimeout for the
	// store lock (error 11), none found the pool exhausted. How long calls
	// wait for the lock is a performance figure: test/bench measures it.
	errs.report(t, "failed calls (exhaustion cannot happen here and a lock timeout, error 11, must not: any error is a failure)")
	if n < calls {
		t.Errorf("only %d of %d calls completed", n, calls)
	}

	path := store.FilePath(dir, network)
	snap := readStore(t, path)
	checkIntegrity(t, snap)
	if snap.Count != 0 || len(snap.Records) != 0 {
		t.Errorf("store holds %d records after every container was deleted; first: %+v", snap.Count, snap.Records[0])
	}
	if len(snap.Owners) != 0 {
		t.Errorf("owners index holds %d entries after every container was deleted; first: %+v", len(snap.Owners), snap.Owners[0])
	}
	var all []string
	ids.Range(func(k, _ any) bool { all = append(all, k.(string)); return true })
	if left := byOwner(t, path, all, "eth0"); len(left) != 0 {
		t.Errorf("ByOwner finds records for %d deleted containers", len(left))
	}
	made := int(releases.Load())
	lo, hi := auditEntries(made)
	if got := len(snap.Audit); got < lo || got > hi {
		t.Errorf("audit log holds %d entries after %d releases, want %d to %d", got, made, lo, hi)
	}
	// Every release in the log names an address its container was seen to
	// hold, and no container's address is released twice.
	var bad errorList
	seen := map[string]bool{}
	for _, ev := range snap.Audit {
		if ev.Action != "release" {
			bad.add("audit entry %+v: want only releases", ev)
			continue
		}
		key := ev.ContainerID + " " + ev.IP.String()
		if !slices.Contains(hold.held[ev.ContainerID], ev.IP) {
			bad.add("audit: %s released %s, which it never held (it held %v)", ev.ContainerID, ev.IP, hold.held[ev.ContainerID])
		}
		if seen[key] {
			bad.add("audit: %s released %s twice", ev.ContainerID, ev.IP)
		}
		seen[key] = true
	}
	bad.report(t, "audit entries that do not match what the containers held")
	if snap.Size > 4<<20 {
		t.Errorf("store file grew to %d bytes for an empty pool", snap.Size)
	}
	t.Logf("%s: store %d bytes, %d audit entries after %d releases, 0 records", network, snap.Size, len(snap.Audit), made)
}
