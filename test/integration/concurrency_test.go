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

	"github.com/hostlease/hostlease/pkg/allocator"
)

// liveSet is the test's view of which container holds which address.
// An address enters it when an ADD process has printed it and leaves it only
// after the DEL process for its holder has exited 0. Between the start and the
// end of that DEL the address is "releasing": a concurrent ADD may already have
// been handed it (its DEL transaction committed before the process exited), so
// only an address whose holder has not even started its DEL is a duplicate.
type liveSet struct {
	mu      sync.Mutex
	holder  map[netip.Addr]string
	release map[netip.Addr]bool
	maxLive int
}

func newLiveSet() *liveSet {
	return &liveSet{holder: map[netip.Addr]string{}, release: map[netip.Addr]bool{}}
}

// add registers ips for id and returns the addresses that another container
// still held (not releasing) at that moment.
func (l *liveSet) add(id string, ips []netip.Addr) (dups []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ip := range ips {
		if h, ok := l.holder[ip]; ok && !l.release[ip] {
			dups = append(dups, fmt.Sprintf("%s handed to %s while live for %s", ip, id, h))
			continue
		}
		l.holder[ip] = id
		delete(l.release, ip)
	}
	l.maxLive = max(l.maxLive, len(l.holder))
	return dups
}

// releasing marks id's addresses as being released (its DEL is starting).
func (l *liveSet) releasing(id string, ips []netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ip := range ips {
		if l.holder[ip] == id {
			l.release[ip] = true
		}
	}
}

// remove drops id's addresses once its DEL exited 0; an address already handed
// to a new holder stays with that holder.
func (l *liveSet) remove(id string, ips []netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ip := range ips {
		if l.holder[ip] == id {
			delete(l.holder, ip)
			delete(l.release, ip)
		}
	}
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

func (l *latencies) max() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, d := range l.d {
		m = max(m, d)
	}
	return m
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
// small pool (a /26: 61 allocatable addresses, so 32 workers holding at most
// one address each can never exhaust it, yet addresses are reused hundreds of
// times). Each worker loops ADD (fresh container ID) then DEL. It guarantees:
//   - no address returned by ADD is held by another live container at that
//     moment (checked against the test's live set, under a mutex);
//   - every call exits 0 with a well-formed result: no exhaustion, no lock
//     timeout (error 11), no other error, and no call takes more than half the
//     default lockTimeout (the store lock is handed over promptly);
//   - afterwards the store opens, holds no record, its owners index is empty
//     (raw bbolt walk, and ByOwner for every container ID used), bbolt's page
//     check is clean, and the audit log is bounded (≤ 2048 entries) while the
//     file stays small.
//
// The dual-stack variant (a /26 and a /122 in two range sets) additionally
// guarantees each ADD gets exactly one address per family.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 5000-call process storm")
	}
	t.Run("ipv4", func(t *testing.T) {
		storm(t, "conc4", 32, 5120, []string{"10.90.0.0/26"})
	})
	t.Run("dualstack", func(t *testing.T) {
		storm(t, "conc46", 32, 640, []string{"10.90.1.0/26", "fd00:90::/122"})
	})
}

// storm runs workers processes in parallel until calls ADD+DEL calls were made.
func storm(t *testing.T, network string, workers, calls int, subnets []string) {
	dir := t.TempDir()
	conf := ipamConf(t, network, dir, subnets...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	live := newLiveSet()
	var errs, dups errorList
	var lat latencies
	var cycles atomic.Int64
	var ids sync.Map
	perWorker := calls / 2 / workers
	if perWorker*2*workers < calls {
		perWorker++
	}

	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				if ctx.Err() != nil {
					errs.add("worker %d: deadline reached after %d cycles", w, i)
					return
				}
				id := fmt.Sprintf("%s-w%02d-%05d", network, w, i)
				ids.Store(id, true)
				base := call{ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id,
					Args: podArgs("conc", id, fmt.Sprintf("uid-%d-%d", w, i), id)}
				add := base
				add.Command = "ADD"
				o := runPlugin(ctx, add, conf)
				lat.add(o.Elapsed)
				if !o.OK() {
					errs.add("ADD %s: %v", id, o)
					continue // no address to release; DEL must still succeed below
				}
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
				for _, d := range live.add(id, ips) {
					dups.add("%s", d)
				}

				live.releasing(id, ips)
				del := base
				del.Command = "DEL"
				o = runPlugin(ctx, del, conf)
				lat.add(o.Elapsed)
				if !o.OK() {
					errs.add("DEL %s: %v", id, o)
					continue // keep the addresses live: nobody else may get them
				}
				live.remove(id, ips)
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := int(cycles.Load()) * 2
	t.Logf("%s: %d workers, %d ADD/DEL calls (%d full cycles) in %v = %.0f calls/s; max live %d; per-call latency %s",
		network, workers, n, cycles.Load(), elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), live.maxLive, lat.summary())
	dups.report(t, "duplicate live addresses")
	errs.report(t, "failed calls (exhaustion cannot happen here: any error is a failure)")
	// bbolt alone polls its lock every 50ms and let calls wait 9.7s here,
	// a hair under the 10s default lockTimeout (spurious error 11).
	if m := lat.max(); m > allocator.DefaultLockTimeout/2 {
		t.Errorf("a call took %v: lock waits come close to the %v lockTimeout", m, allocator.DefaultLockTimeout)
	}
	if n < calls {
		t.Errorf("only %d of %d calls completed", n, calls)
	}

	path := allocator.StorePath(dir, network)
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
	const auditLimit = 2048 // pkg/allocator's documented bound
	releases := len(all) * len(subnets)
	if got := len(snap.Audit); got == 0 || got > auditLimit || (releases > auditLimit && got != auditLimit) {
		t.Errorf("audit log holds %d entries after %d releases, want min(releases, %d)", got, releases, auditLimit)
	}
	if snap.Size > 4<<20 {
		t.Errorf("store file grew to %d bytes for an empty pool", snap.Size)
	}
	t.Logf("%s: store %d bytes, %d audit entries, 0 records", network, snap.Size, len(snap.Audit))
}
