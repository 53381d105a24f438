package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// How a killer picks the moment to SIGKILL a plugin process.
const (
	// modeDelay: a uniformly random 0–5ms after start (a plugin process lives
	// ~2–6ms here, so this spreads kills over its whole life).
	modeDelay = "random-delay"
	// modeOpened: as soon as /proc/<pid>/fd shows the store open, then a random
	// 0–1ms more: while it waits for the lock or runs its transaction.
	modeOpened = "after-store-open"
	// modeLocked: once /proc/locks shows it holding the store's flock, then a
	// random 0–2ms more: inside the read-write transaction (writing pages,
	// fdatasync, meta page) or just after its commit.
	modeLocked = "holding-lock"
)

var killModes = []string{modeDelay, modeDelay, modeOpened, modeLocked}

// killStats counts where kills landed.
type killStats struct {
	mu        sync.Mutex
	kills     int
	exited    int            // the process finished before the signal
	byMode    map[string]int // kills by mode
	byPhase   map[string]int // kills by phase observed just before the signal
	byOutcome map[string]int // what the store shows for the killed call
}

func newKillStats() *killStats {
	return &killStats{byMode: map[string]int{}, byPhase: map[string]int{}, byOutcome: map[string]int{}}
}

func (k *killStats) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	f := func(m map[string]int) string {
		var parts []string
		for key, n := range m {
			parts = append(parts, fmt.Sprintf("%s=%d", key, n))
		}
		sort.Strings(parts)
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("%d kills (%d more finished before the signal); by mode: %s; phase at kill: %s; outcome: %s",
		k.kills, k.exited, f(k.byMode), f(k.byPhase), f(k.byOutcome))
}

// phaseOf looks at a running plugin process: whether it has the store file
// open, and whether it holds or waits for the store's flock.
func phaseOf(pid int, storePath string) string {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return "gone"
	}
	open := false
	for _, e := range entries {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); l == storePath {
			open = true
			break
		}
	}
	if !open {
		return "store-not-open"
	}
	switch lockState(pid) {
	case "held":
		return "holding-lock"
	case "waiting":
		return "waiting-for-lock"
	}
	return "store-open-unlocked"
}

// lockState reads /proc/locks for pid's flock: "held", "waiting" or "".
func lockState(pid int) string {
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return ""
	}
	want := strconv.Itoa(pid)
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.Contains(line, "FLOCK") {
			continue
		}
		waiting := f[1] == "->"
		if waiting {
			f = f[1:]
		}
		// "N: FLOCK ADVISORY WRITE <pid> <dev:inode> 0 EOF"
		if f[4] == want {
			if waiting {
				return "waiting"
			}
			return "held"
		}
	}
	return ""
}

// waitStopped waits until pid is stopped by a signal (state T in
// /proc/<pid>/stat), or reports false when it exited first. A process in an
// uninterruptible sleep (fdatasync) stops when that returns.
func waitStopped(pid int) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// "pid (comm) S ...": the state follows the last ')'.
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 || i+2 >= len(data) {
			return false
		}
		switch data[i+2] {
		case 'T', 't':
			return true
		case 'Z', 'X':
			return false
		}
		runtime.Gosched()
	}
	return false
}

// killed is one plugin process killed with SIGKILL.
type killed struct {
	id      string
	mode    string
	phase   string
	printed []netip.Prefix // a result it printed before dying, if any
	addr    netip.Addr     // for DEL: the address the container held
}

// killPlugin starts hostlease for c and SIGKILLs it at a moment chosen by mode.
// It returns the kill, or the outcome when the process finished first.
func killPlugin(ctx context.Context, c call, conf []byte, storePath, mode string, rng *rand.Rand) (*killed, outcome, error) {
	cmd, stdout, stderr := pluginCmd(context.WithoutCancel(ctx), c, conf)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, outcome{}, err
	}
	pid := cmd.Process.Pid
	switch mode {
	case modeDelay:
		time.Sleep(time.Duration(rng.Int64N(int64(5 * time.Millisecond))))
	case modeOpened, modeLocked:
		for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
			ph := phaseOf(pid, storePath)
			if ph == "gone" || (mode == modeOpened && ph != "store-not-open") || (mode == modeLocked && ph == "holding-lock") {
				break
			}
		}
		if mode == modeOpened {
			time.Sleep(time.Duration(rng.Int64N(int64(time.Millisecond))))
		} else {
			time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
		}
	}
	// Freeze the process, look at it, then kill it: a stopped process can
	// neither take nor release the store's lock, so the phase seen is the
	// phase the kill lands in.
	phase := "gone"
	if cmd.Process.Signal(syscall.SIGSTOP) == nil && waitStopped(pid) {
		phase = phaseOf(pid, storePath)
	}
	sigErr := cmd.Process.Signal(syscall.SIGKILL)
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			k := &killed{id: c.ContainerID, mode: mode, phase: phase}
			if ips, perr := resultIPs(stdout.Bytes()); perr == nil && len(ips) > 0 {
				k.printed = ips
			}
			return k, outcome{}, nil
		}
	}
	if sigErr != nil && !errors.Is(sigErr, os.ErrProcessDone) {
		return nil, outcome{}, sigErr
	}
	return nil, cniexec.Classify(err, stdout.Bytes(), stderr.Bytes(), time.Since(start)), nil
}

// crashBook is the test's record of what every container should hold.
type crashBook struct {
	mu         sync.Mutex
	held       map[string]netip.Addr // ADD printed a result; not (successfully) deleted
	released   map[string]bool       // DEL exited 0
	killedAdds map[string]*killed
	killedDels map[string]*killed
}

func newCrashBook() *crashBook {
	return &crashBook{held: map[string]netip.Addr{}, released: map[string]bool{},
		killedAdds: map[string]*killed{}, killedDels: map[string]*killed{}}
}

// TestKillDuringAdd SIGKILLs ≥ 200 hostlease ADD processes at random points
// of their life (random delay, right after the store is opened, inside the
// locked transaction) while other processes run normal ADD/DEL cycles and keep
// some addresses. Each process is stopped (SIGSTOP) before it is killed, and
// its phase read from /proc while it is frozen, so the test knows where each
// kill landed. It guarantees that:
//   - at least 40 kills land while the process holds the store's lock, that
//     is inside its read-write transaction or between its commit and exit,
//     and those left some containers with the old state and some with the new;
//
// and that afterwards:
//   - the store opens (store.Open) and every record decodes (ForEach);
//     bbolt's page-level check is clean;
//   - the owners index and the allocs agree both ways; no address has two owners;
//   - every container whose ADD printed a result and was not deleted holds
//     exactly that address, and no deleted container holds anything;
//   - a killed ADD left either nothing or one complete pending record (all
//     fields: owner, pod, netns, prefix, gateway, range set, created), and a
//     killed ADD that managed to print a result holds that address;
//   - no record belongs to a container the test never saw;
//   - normal calls never fail, and DEL of every remaining container
//     succeeds and empties the store.
func TestKillDuringAdd(t *testing.T) {
	crashRun(t, "crash-add", false)
}

// TestKillDuringDel is TestKillDuringAdd's counterpart for DEL: each killer
// ADDs a container normally, then SIGKILLs its DEL at a random point. It
// guarantees the same store invariants, and that a killed DEL left the
// container either holding exactly its address or nothing (never a record
// without its index entry or the reverse), and that retrying DEL succeeds.
func TestKillDuringDel(t *testing.T) {
	crashRun(t, "crash-del", true)
}

func crashRun(t *testing.T, network string, killDel bool) {
	const (
		wantKills = 200
		// wantLocked kills must land while the process holds the store's
		// lock (seen from outside, with the process stopped: see killPlugin):
		// inside its read-write transaction or between its commit and exit.
		wantLocked = 40
		killers    = 3
		workers    = 2
		subnet     = "10.91.0.0/22"
	)
	runStart := time.Now() // before the first call: every record is created after it
	dir := t.TempDir()
	conf := ipamConf(t, network, dir, subnet)
	path := store.FilePath(dir, network)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	book := newCrashBook()
	stats := newKillStats()
	var errs errorList
	var kills, lockedKills atomic.Int64
	var normalCalls atomic.Int64
	mkCall := func(cmd, id string) call {
		return call{Command: cmd, ContainerID: id, IfName: "eth0", Netns: "/var/run/netns/" + id,
			Args: podArgs("crash", "pod-"+id, "uid-"+id, id)}
	}
	// add runs a normal ADD and books its address.
	add := func(id string) (netip.Addr, bool) {
		normalCalls.Add(1)
		o := runPlugin(ctx, mkCall("ADD", id), conf)
		if !o.OK() {
			errs.add("normal ADD %s: %v", id, o)
			return netip.Addr{}, false
		}
		ips, err := resultIPs(o.Stdout)
		if err != nil || len(ips) != 1 {
			errs.add("normal ADD %s: result %v %v", id, ips, err)
			return netip.Addr{}, false
		}
		book.mu.Lock()
		defer book.mu.Unlock()
		for other, ip := range book.held {
			if ip == ips[0].Addr() {
				errs.add("ADD %s got %s, still held by %s", id, ip, other)
			}
		}
		book.held[id] = ips[0].Addr()
		return ips[0].Addr(), true
	}
	del := func(id string) {
		normalCalls.Add(1)
		if o := runPlugin(ctx, mkCall("DEL", id), conf); !o.OK() {
			errs.add("normal DEL %s: %v", id, o)
			return
		}
		book.mu.Lock()
		delete(book.held, id)
		book.released[id] = true
		book.mu.Unlock()
	}

	// Create the store before the storm, so every kill hits an existing store.
	if _, ok := add(network + "-first"); !ok {
		errs.report(t, "failures")
		t.FailNow()
	}

	start := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%s-n%d-%04d", network, w, i)
				if _, ok := add(id); ok && i%4 != 0 {
					del(id) // every 4th container keeps its address
				}
			}
		})
	}
	var kwg sync.WaitGroup
	for k := range killers {
		kwg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(k)))
			for i := 0; (kills.Load() < wantKills || lockedKills.Load() < wantLocked) && kills.Load() < 3*wantKills && ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%s-k%d-%04d", network, k, i)
				mode := killModes[rng.IntN(len(killModes))]
				verb := "ADD"
				var addr netip.Addr
				if killDel {
					var ok bool
					if addr, ok = add(id); !ok {
						continue
					}
					verb = "DEL"
				}
				kl, o, err := killPlugin(ctx, mkCall(verb, id), conf, path, mode, rng)
				switch {
				case err != nil:
					errs.add("%s %s: %v", verb, id, err)
				case kl == nil && !o.OK():
					errs.add("%s %s (finished before the kill): %v", verb, id, o)
				case kl == nil:
					stats.mu.Lock()
					stats.exited++
					stats.mu.Unlock()
					if killDel {
						book.mu.Lock()
						delete(book.held, id)
						book.released[id] = true
						book.mu.Unlock()
					} else if ips, perr := resultIPs(o.Stdout); perr != nil || len(ips) != 1 {
						errs.add("ADD %s: result %v %v", id, ips, perr)
					} else {
						book.mu.Lock()
						book.held[id] = ips[0].Addr()
						book.mu.Unlock()
					}
				default:
					kills.Add(1)
					kl.addr = addr
					stats.mu.Lock()
					stats.kills++
					stats.byMode[mode]++
					stats.byPhase[kl.phase]++
					if kl.phase == "holding-lock" {
						lockedKills.Add(1)
					}
					stats.mu.Unlock()
					book.mu.Lock()
					if killDel {
						delete(book.held, id)
						book.killedDels[id] = kl
					} else {
						book.killedAdds[id] = kl
					}
					book.mu.Unlock()
				}
			}
		})
	}
	kwg.Wait()
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	errs.report(t, "failed calls")
	if n := kills.Load(); n < wantKills {
		t.Fatalf("only %d kills landed (want %d): %v", n, wantKills, stats)
	}
	if n := lockedKills.Load(); n < wantLocked {
		t.Fatalf("only %d kills landed while the process held the store's lock (want %d): %v", n, wantLocked, stats)
	}

	// The store must be intact.
	snap := readStore(t, path)
	checkIntegrity(t, snap)
	recs := map[string][]*allocator.Record{}
	for _, r := range snap.Records {
		recs[r.ContainerID] = append(recs[r.ContainerID], r)
	}
	pfx := netip.MustParsePrefix(subnet)
	complete := func(id string, r *allocator.Record) error {
		var bad []string
		check := func(ok bool, what string) {
			if !ok {
				bad = append(bad, what)
			}
		}
		check(r.ContainerID == id && r.IfName == "eth0", "owner")
		check(r.Network == network, "network")
		check(pfx.Contains(r.IP) && r.PrefixLen == pfx.Bits(), "address/prefix")
		check(r.Gateway == netip.MustParseAddr("10.91.0.1") && r.RangeSet == 0, "gateway/range set")
		check(r.PodNamespace == "crash" && r.PodName == "pod-"+id && r.PodUID == "uid-"+id, "pod fields")
		check(r.Netns == "/var/run/netns/"+id, "netns")
		check(r.State == allocator.StatePending && r.Source == "add", "state/source")
		// Created is dated by the ADD that made the record: after this run
		// began (to the second, whatever precision the store keeps) and not
		// in the future.
		check(!r.Created.Before(runStart.Truncate(time.Second)) && !r.Created.After(time.Now()), "created")
		if len(bad) > 0 {
			return fmt.Errorf("incomplete record %+v: bad %s", *r, strings.Join(bad, ", "))
		}
		return nil
	}

	book.mu.Lock()
	defer book.mu.Unlock()
	for id, ip := range book.held {
		switch rs := recs[id]; {
		case len(rs) != 1:
			t.Errorf("container %s completed ADD with %s but the store has %d records for it", id, ip, len(rs))
		case rs[0].IP != ip:
			t.Errorf("container %s completed ADD with %s but the store says it holds %s", id, ip, rs[0].IP)
		default:
			if err := complete(id, rs[0]); err != nil {
				t.Errorf("container %s: %v", id, err)
			}
		}
	}
	for id := range book.released {
		if rs := recs[id]; len(rs) != 0 {
			t.Errorf("container %s was deleted (DEL exited 0) but still holds %s", id, rs[0].IP)
		}
	}
	lockedOutcomes := map[string]int{}
	for id, k := range book.killedAdds {
		rs := recs[id]
		outcome := "nothing-left"
		switch {
		case len(rs) > 1:
			t.Errorf("killed ADD %s left %d records", id, len(rs))
		case len(rs) == 1:
			outcome = "complete-record"
			if err := complete(id, rs[0]); err != nil {
				t.Errorf("killed ADD %s (%s, %s): %v", id, k.mode, k.phase, err)
			}
		}
		if k.printed != nil {
			outcome = "printed-result"
			if len(rs) != 1 || rs[0].IP != k.printed[0].Addr() {
				t.Errorf("killed ADD %s printed %v before dying, but the store holds %v for it", id, k.printed, rs)
			}
		}
		stats.byOutcome[outcome]++
		if k.phase == "holding-lock" {
			lockedOutcomes[outcome]++
		}
	}
	for id, k := range book.killedDels {
		rs := recs[id]
		switch {
		case len(rs) == 0:
			stats.byOutcome["released"]++
			if k.phase == "holding-lock" {
				lockedOutcomes["released"]++
			}
		case len(rs) == 1 && rs[0].IP == k.addr:
			stats.byOutcome["still-held"]++
			if k.phase == "holding-lock" {
				lockedOutcomes["still-held"]++
			}
			if err := complete(id, rs[0]); err != nil {
				t.Errorf("killed DEL %s: %v", id, err)
			}
		default:
			t.Errorf("killed DEL %s held %s; the store now has %v for it", id, k.addr, rs)
		}
	}
	for id, rs := range recs {
		_, h := book.held[id]
		_, ka := book.killedAdds[id]
		_, kd := book.killedDels[id]
		if !h && !ka && !kd {
			t.Errorf("record %s belongs to %s, which has no reason to hold anything", rs[0].IP, id)
		}
	}
	// Kills holding the lock landed on both sides of the commit: some left
	// the old state, some the new one.
	before, after := "nothing-left", "complete-record"
	if killDel {
		before, after = "still-held", "released"
	}
	if lockedOutcomes[before] == 0 || lockedOutcomes[after]+lockedOutcomes["printed-result"] == 0 {
		t.Errorf("kills holding the store's lock left %v: want some %s and some %s", lockedOutcomes, before, after)
	}
	t.Logf("%s: %v in %v alongside %d normal calls; store: %d records, %d bytes; kills holding the lock: %v",
		network, stats, elapsed.Round(time.Millisecond), normalCalls.Load(), len(snap.Records), snap.Size, lockedOutcomes)

	// The store keeps serving: DEL (a retry for killed DELs) every container left.
	var left []string
	for id := range recs {
		left = append(left, id)
	}
	var derrs errorList
	var dwg sync.WaitGroup
	ch := make(chan string)
	for range 8 {
		dwg.Go(func() {
			for id := range ch {
				if o := runPlugin(ctx, mkCall("DEL", id), conf); !o.OK() {
					derrs.add("DEL %s: %v", id, o)
				}
			}
		})
	}
	for _, id := range left {
		ch <- id
	}
	close(ch)
	dwg.Wait()
	derrs.report(t, "failed DELs of the remaining containers")
	snap = readStore(t, path)
	checkIntegrity(t, snap)
	if len(snap.Records) != 0 || len(snap.Owners) != 0 {
		t.Errorf("after deleting every container: %d records, %d owners entries", len(snap.Records), len(snap.Owners))
	}
}
