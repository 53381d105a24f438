package faultinject

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/leasecheck"
)

// TestFaultInjection damages a copy of a real store at every point of the
// catalogue (damage_test.go) and drives it through real processes one at a
// time: after each plugin call the store is read back and compared with the
// model, so a call that frees or hands out the wrong address is named.
func TestFaultInjection(t *testing.T) {
	forEachCase(t, false)
}

// TestFaultInjectionConcurrent runs the same catalogue with the plugin phase
// done by concurrent plugin processes: workers ADD fresh sandboxes, hold them
// across their next ADD and DEL them, while the damaged owners are deleted and
// others checked. Two holdings of one address are a duplicate when both ADDs
// had returned before either DEL started (internal/testing/leasecheck).
func TestFaultInjectionConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the concurrent damage suite")
	}
	forEachCase(t, true)
}

func forEachCase(t *testing.T, concurrent bool) {
	ss := seeds()
	if concurrent && *seedFlag == 0 {
		ss = ss[:1] // bounded: one CI seed runs concurrently
	}
	for si, seed := range ss {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("faultinject seed %d; replay with: go test ./test/faultinject -run '^%s$' -v -args -faultinject.seed=%d [-faultinject.case=NAME]", seed, t.Name()[:strings.Index(t.Name(), "/")], seed)
			g := buildGolden(t, seed)
			if l, err := walkFile(g.path); err != nil {
				t.Fatalf("golden store: %v", err)
			} else {
				t.Logf("golden store: %d records, page size %d, %d reachable pages", len(g.owners), l.PageSize, len(l.Pages))
			}
			for i, d := range allDamages(rand.New(rand.NewPCG(uint64(seed), 7))) {
				if *caseFlag != "" && !strings.Contains(d.name, *caseFlag) {
					continue
				}
				if len(ss) > 1 && !full() && i%len(ss) != si {
					continue // this case runs on another of the CI seeds
				}
				t.Run(d.name, func(t *testing.T) {
					h := fnv.New64a()
					h.Write([]byte(d.name))
					runCase(t, g, d, rand.New(rand.NewPCG(uint64(seed), h.Sum64())), concurrent)
				})
			}
		})
	}
}

// run is one damage case in progress.
type run struct {
	*dcase
	t          *testing.T
	d          damage
	concurrent bool
	// refused: an ADD after the damage was refused (class store only).
	refused bool
	// deleted are owners whose DEL exited 0 in this case.
	deleted []*owner
	mu      sync.Mutex
}

func runCase(t *testing.T, g *golden, d damage, rng *rand.Rand, concurrent bool) {
	n := newNode(t, g)
	c := &dcase{node: n, rng: rng}
	if err := d.apply(c); err != nil {
		t.Fatalf("applying damage %s: %v", d.name, err)
	}
	t.Logf("damage %s (%s): %s", d.name, d.class, c.what)
	r := &run{dcase: c, t: t, d: d, concurrent: concurrent}
	before, err := os.Stat(n.path())
	if err != nil {
		t.Fatal(err)
	}
	if d.root {
		r.rootCheck()
	}
	if d.sweepFirst {
		r.sweep(before)
	}
	if concurrent {
		r.concurrentPluginPhase()
	} else {
		r.pluginPhase()
	}
	r.cliPhase()
	if !d.sweepFirst {
		r.sweep(before)
	}
	r.repair()
	r.final()
}

// view reads the store, or returns nil when bbolt cannot read it.
func (r *run) view() *storeView {
	v, err := readView(r.path())
	if err != nil {
		return nil
	}
	return v
}

// checkVanished reports addresses that disappeared from the store between
// two views, other than those the call was allowed to free.
func (r *run) checkVanished(call string, before, after *storeView, mayFree ...netip.Addr) {
	r.t.Helper()
	if before == nil || after == nil {
		return
	}
	for ip := range before.Keys {
		if after.Keys[ip] || slices.Contains(mayFree, ip) {
			continue
		}
		who := "no owner in the model"
		if o := r.m.ownerOf(ip); o != nil {
			who = fmt.Sprintf("%s owner %s", o.Role, shortName(o.ID))
		}
		if r.m.quarantined[ip] {
			who = "a quarantined record"
		}
		if o := r.m.ownerOf(ip); (o != nil && o.Role.live()) || r.m.quarantined[ip] {
			r.t.Errorf("%s freed %s, held by %s", call, ip, who)
		}
	}
}

func (r *run) newOwner() *owner {
	r.mu.Lock()
	id := newID(r.rng)
	r.mu.Unlock()
	if err := os.WriteFile(r.netns(id), nil, 0o600); err != nil {
		r.t.Fatal(err)
	}
	return &owner{ID: id, Role: roleInFlight, Intact: true}
}

// add runs ADD for a fresh sandbox (in flight: CRI does not list it yet) and
// checks its answer against the model and the store. It returns nil when
// the ADD failed.
func (r *run) add(when string) *owner {
	r.t.Helper()
	o := r.newOwner()
	held := r.m.held()
	before := r.view()
	out := runPlugin(invocation{Command: "ADD", ContainerID: o.ID, Netns: r.netns(o.ID), Conf: r.conf})
	if !out.OK() {
		switch {
		case r.d.class == classLogical:
			r.t.Errorf("%s: ADD %s failed on a store with logical damage: %v", when, shortName(o.ID), out)
		case out.Err == nil || (out.Err.Code != 11 && out.Err.Code != 5):
			r.t.Errorf("%s: ADD %s failed with neither CNI 11 nor 5: %v", when, shortName(o.ID), out)
		}
		r.mu.Lock()
		r.refused = true
		r.mu.Unlock()
		return nil
	}
	ip, err := resultIP(out.Stdout)
	if err != nil {
		r.t.Errorf("%s: ADD %s: %v", when, shortName(o.ID), err)
		return nil
	}
	o.IP = ip
	if !inPool(ip) {
		r.t.Errorf("%s: ADD %s returned %s, outside the pool", when, shortName(o.ID), ip)
	}
	if who, ok := held[ip]; ok {
		r.t.Errorf("%s: ADD %s returned %s, held by %s", when, shortName(o.ID), ip, who)
	}
	if before != nil && before.Keys[ip] {
		what := "an undecodable record"
		if rec := before.Records[ip]; rec != nil {
			what = "a record of " + shortName(rec.ContainerID)
		}
		r.t.Errorf("%s: ADD %s returned %s, for which the store held %s", when, shortName(o.ID), ip, what)
	}
	r.checkVanished(when+": ADD "+shortName(o.ID), before, r.view())
	r.m.mu.Lock()
	r.m.owners[o.ID] = o
	r.m.mu.Unlock()
	return o
}

// del runs DEL for o as the runtime does when it tears the sandbox down, then
// forgets the sandbox (CRI and netns). DEL must exit 0, always.
func (r *run) del(when string, o *owner) {
	r.t.Helper()
	before := r.view()
	if out := runPlugin(invocation{Command: "DEL", ContainerID: o.ID, Netns: r.netns(o.ID), Conf: r.conf}); !out.OK() {
		r.m.mu.Lock()
		role, intact := o.Role, o.Intact
		r.m.mu.Unlock()
		r.t.Errorf("%s: DEL %s (%s, intact %v) did not exit 0: %v", when, shortName(o.ID), role, intact, out)
		return
	}
	r.forget(o)
	if r.refusing() || (r.concurrent && r.d.class == classStore) {
		// A store that does not serve cannot release: DEL exits 0 and the
		// record is left for the daemon (or the rebuild) to drop. With
		// concurrent calls on a damaged store, whether the store served
		// this DEL is not known.
		r.m.mu.Lock()
		o.Intact = false
		r.m.mu.Unlock()
		return
	}
	if r.concurrent {
		return
	}
	after := r.view()
	r.checkVanished(when+": DEL "+shortName(o.ID), before, after, o.IP)
	if after != nil && o.Intact {
		if ips := after.heldBy(o.ID); len(ips) > 0 {
			r.t.Errorf("%s: DEL %s exited 0 but the store still holds %v for it", when, shortName(o.ID), ips)
		}
	}
	if after != nil && r.m.quarantined[o.IP] && !after.Keys[o.IP] {
		r.t.Errorf("%s: DEL %s freed %s, whose record is damaged (it must stay reserved until released)", when, shortName(o.ID), o.IP)
	}
}

func (r *run) refusing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *run) forget(o *owner) {
	r.cri.Remove(o.ID)
	_ = os.Remove(r.netns(o.ID))
	r.m.mu.Lock()
	o.Role = roleDeleted
	r.m.mu.Unlock()
	r.mu.Lock()
	r.deleted = append(r.deleted, o)
	r.mu.Unlock()
}

// others picks up to k intact READY owners that are not the target.
func (r *run) others(k int) []*owner {
	ready := r.m.byRole(roleReady)
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	var out []*owner
	for _, o := range ready {
		if o != r.target && o != r.alsoDelete && o.Intact && len(out) < k {
			out = append(out, o)
		}
	}
	return out
}

// simpleVerb runs CHECK, STATUS or GC and asserts exit 0 where it is due.
func (r *run) simpleVerb(when, verb string, o *owner, conf []byte, mayFree ...netip.Addr) {
	r.t.Helper()
	id, netns := "gc-or-status", ""
	if o != nil {
		id, netns = o.ID, r.netns(o.ID)
	}
	before := r.view()
	out := runPlugin(invocation{Command: verb, ContainerID: id, Netns: netns, Conf: conf})
	switch {
	case out.OK():
	case r.d.class == classLogical:
		r.t.Errorf("%s: %s %s did not exit 0 on a store with logical damage: %v", when, verb, shortName(id), out)
	case out.Err == nil || (out.Err.Code != 5 && out.Err.Code != 11 && !(verb == "STATUS" && out.Err.Code == 50)):
		// A verb that must read what a damaged page holds may refuse, with
		// the code of an I/O failure or of a store waiting for its repair.
		r.t.Errorf("%s: %s %s on a damaged store: want exit 0, CNI 5 or 11, got %v", when, verb, shortName(id), out)
	}
	if !r.concurrent {
		r.checkVanished(when+": "+verb, before, r.view(), mayFree...)
	}
}

// validAttachments are the live owners: what a runtime would pass to GC.
func (r *run) validAttachments() []string {
	var ids []string
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	for _, o := range r.m.owners {
		if o.Role.live() {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

// pluginPhase: the runtime keeps working on the damaged store.
func (r *run) pluginPhase() {
	const when = "after damage"
	r.add(when)
	if r.target != nil && !r.keepTarget {
		r.del(when, r.target)
	}
	if r.alsoDelete != nil {
		r.del(when, r.alsoDelete)
	}
	for _, o := range r.others(3) {
		if o != nil && len(r.deleted) < 3 {
			r.del(when, o)
			break
		}
	}
	if dead := r.m.byRole(roleDead); len(dead) > 1 && dead[0] != r.target {
		r.del(when, dead[0])
	}
	// A DEL for a sandbox the store never knew.
	r.del(when, r.newOwner())
	r.add(when)
	for _, o := range r.others(2) {
		r.simpleVerb(when, "CHECK", o, r.conf)
	}
	r.simpleVerb(when, "STATUS", nil, r.conf)
	// GC keeps every live attachment: it may free dead owners' records only.
	var mayFree []netip.Addr
	for _, o := range r.m.byRole(roleDead) {
		mayFree = append(mayFree, o.IP)
	}
	if r.target != nil && !r.target.Intact && !r.m.quarantined[r.target.IP] && !r.target.Role.live() {
		mayFree = append(mayFree, r.target.IP) // a record now naming an unknown owner
	}
	r.simpleVerb(when, "GC", nil, gcConf(r.dataDir, r.validAttachments()), mayFree...)
}

// sinceBeforeThePhase names the owner of a holding booked for a record that
// existed before the concurrent phase.
func sinceBeforeThePhase(owner string) string { return owner + " (held since before the phase)" }

// concurrentPluginPhase: workers ADD and hold while the damaged owners are
// deleted and others checked, all as concurrent processes.
func (r *run) concurrentPluginPhase() {
	const when = "concurrently after damage"
	const workers, cycles = 4, 4
	h := leasecheck.NewBook()
	start := time.Now().Add(-time.Hour)
	static := map[string]*leasecheck.Holding{}
	for ip, who := range r.m.held() {
		iv := &leasecheck.Holding{Owner: sinceBeforeThePhase(who), AddDone: start}
		if o := r.m.ownerOf(ip); o != nil {
			iv.Owner = sinceBeforeThePhase(o.Role.String() + " owner " + o.ID)
			static[o.ID] = iv
		}
		h.Hold(iv, ip)
	}
	del := func(o *owner) {
		if iv := static[o.ID]; iv != nil && !r.m.quarantined[o.IP] {
			h.Releasing(iv)
		}
		r.del(when, o)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var prev *owner
			var prevIv *leasecheck.Holding
			for range cycles {
				o := r.newOwner()
				iv := &leasecheck.Holding{Owner: shortName(o.ID), AddStart: time.Now()}
				out := runPlugin(invocation{Command: "ADD", ContainerID: o.ID, Netns: r.netns(o.ID), Conf: r.conf})
				iv.AddDone = time.Now()
				if out.OK() {
					ip, err := resultIP(out.Stdout)
					if err != nil {
						r.t.Errorf("%s: ADD %s: %v", when, shortName(o.ID), err)
					} else {
						o.IP = ip
						h.Hold(iv, ip)
						r.m.mu.Lock()
						r.m.owners[o.ID] = o
						r.m.mu.Unlock()
					}
				} else if r.d.class == classLogical {
					r.t.Errorf("%s: ADD %s failed on a store with logical damage: %v", when, shortName(o.ID), out)
				} else {
					r.mu.Lock()
					r.refused = true
					r.mu.Unlock()
				}
				// The previous sandbox was held across this ADD; now it goes.
				if prev != nil {
					h.Releasing(prevIv)
					r.del(when, prev)
				}
				prev, prevIv = o, iv
				if !out.OK() {
					prev = nil
				}
			}
			// The last one stays: it is live (in flight) for the rest of the case.
		})
	}
	wg.Go(func() {
		if r.target != nil && !r.keepTarget {
			del(r.target)
		}
		if r.alsoDelete != nil {
			del(r.alsoDelete)
		}
		for _, o := range r.others(2) {
			del(o)
		}
		del(r.newOwner())
	})
	wg.Go(func() {
		for _, o := range r.others(4)[2:] {
			r.simpleVerb(when, "CHECK", o, r.conf)
		}
		r.simpleVerb(when, "STATUS", nil, r.conf)
	})
	wg.Wait()
	for _, d := range h.Duplicates() {
		r.t.Errorf("%s: duplicate: %s held by %s and %s at once (both ADDs returned, by %s, before either DEL started)",
			when, d.IP, d.A.Owner, d.B.Owner, d.Both.Format(time.StampMicro))
	}
	r.simpleVerb("after the concurrent phase", "GC", nil, gcConf(r.dataDir, r.validAttachments()))
}

var damageWords = regexp.MustCompile(`(?i)damag|quarantin|undecodable|corrupt|unreadable`)

// cliPhase: an operator looks at the node. Every damaged record must be
// visible, and with logical damage the healthy records too.
func (r *run) cliPhase() {
	list := runCLI(r.t, "list", "--data-dir", r.dataDir)
	status := runCLI(r.t, "status", "--data-dir", r.dataDir)
	// hostlease-gc's contract: exit 3 when every store was read and some hold
	// damaged records (1 when a store could not be read at all).
	for ip := range r.m.quarantined {
		shown := false
		for _, line := range strings.Split(list.Stdout, "\n") {
			if strings.Contains(line, ip.String()) && damageWords.MatchString(line) {
				shown = true
			}
		}
		if !shown || list.Code != 3 {
			r.t.Errorf("damaged record %s: want list to exit 3 with a row naming it as damaged:\n%s", ip, list)
		}
		if status.Code != 3 || !damageWords.MatchString(status.Stdout) {
			r.t.Errorf("damaged record %s: want status to exit 3 and show the damage:\n%s", ip, status)
		}
	}
	if r.d.class == classLogical {
		for _, o := range r.m.byRole(roleReady) {
			if o.Intact && !strings.Contains(list.Stdout, o.IP.String()+" ") {
				r.t.Errorf("list does not show %s (READY %s, intact record) on a store with logical damage:\n%s", o.IP, shortName(o.ID), list)
				break
			}
		}
	}
}

// sweep runs one daemon sweep against the fake runtime and checks that no
// live address was reclaimed, that a store with logical damage stays in place
// and that its healthy records keep being swept (proven leaks reclaimed).
func (r *run) sweep(before os.FileInfo) {
	res := daemonSweep(r.t, 1,
		"--cri-endpoint", r.cri.Endpoint(), "--data-dir", r.dataDir, "--netns-dir", r.netnsDir,
		"--interval", "30m", "--misses", "1", "--netns-grace", "0s")
	after, err := os.Stat(r.path())
	if err != nil {
		r.t.Errorf("after a sweep the store is gone: %v\n%s", err, strings.Join(res.Log, "\n"))
		return
	}
	if r.d.class == classLogical && !os.SameFile(before, after) {
		r.t.Errorf("the daemon replaced a store with logical damage (set aside / rebuilt):\n%s", strings.Join(res.Log, "\n"))
	}
	v := r.view()
	if v == nil {
		if r.d.class == classLogical {
			r.t.Errorf("after a sweep the store cannot be read")
		}
		return
	}
	failed := r.t.Failed()
	r.checkLive("after a sweep", v)
	if r.d.class == classLogical {
		for _, o := range r.m.byRole(roleDead) {
			if len(v.heldBy(o.ID)) > 0 {
				r.t.Errorf("after a sweep: proven leak %s (%s, netns gone, absent from CRI) was not reclaimed: the daemon must keep sweeping a network's healthy records",
					o.IP, shortName(o.ID))
			}
		}
	}
	if !failed && r.t.Failed() {
		r.t.Logf("hostlease-gc log of that sweep:\n%s", strings.Join(res.Log, "\n"))
	}
}

// checkLive: every live owner still holds its address.
func (r *run) checkLive(when string, v *storeView) {
	r.t.Helper()
	for _, o := range r.liveOwners() {
		if o.Role == roleNotReady && r.d.silentLoss {
			continue // records vanished without a trace; CRI vouches for READY sandboxes only
		}
		switch {
		case o.Intact && (v.Records[o.IP] == nil || v.Records[o.IP].ContainerID != o.ID):
			got := "nothing"
			if rec := v.Records[o.IP]; rec != nil {
				got = "a record of " + shortName(rec.ContainerID)
			} else if v.Bad[o.IP] != "" {
				got = "an undecodable record"
			}
			r.t.Errorf("%s: %s owner %s lost %s (the store holds %s there)", when, o.Role, shortName(o.ID), o.IP, got)
		case !o.Intact && !v.Keys[o.IP]:
			r.t.Errorf("%s: %s owner %s (record damaged) lost %s", when, o.Role, shortName(o.ID), o.IP)
		}
	}
	for ip := range r.m.quarantined {
		if !v.Keys[ip] {
			r.t.Errorf("%s: the damaged record %s was freed before an operator released it", when, ip)
		}
	}
}

func (r *run) liveOwners() []*owner {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	var out []*owner
	for _, o := range r.m.owners {
		if o.Role.live() && o.IP.IsValid() {
			out = append(out, o)
		}
	}
	return out
}

// repair is what the runbook says to do: release each damaged record whose
// sandbox is gone; rebuild a store ADD still refuses.
func (r *run) repair() {
	for ip := range r.m.quarantined {
		if o := r.m.ownerOf(ip); o != nil && o.Role.live() {
			continue // its sandbox still runs: not the operator's to free
		}
		res := runCLI(r.t, "release", ip.String(), "--network", network, "--data-dir", r.dataDir, "--yes")
		if res.Code != 0 {
			r.t.Errorf("release of the damaged record %s failed:\n%s", ip, res)
			continue
		}
		if v := r.view(); v != nil && v.Keys[ip] {
			r.t.Errorf("release %s exited 0 but the store still has its record:\n%s", ip, res)
			continue
		}
		delete(r.m.quarantined, ip)
	}
	served := r.add("after the sweep and the repairs") != nil
	if r.d.class == classLogical {
		return // a refused ADD is already reported
	}
	// A store-level damage the operator sees (list fails) or that keeps
	// ADD refused is rebuilt from the runtime.
	if list := runCLI(r.t, "list", "--data-dir", r.dataDir); served && list.Code == 0 {
		return
	}
	res := runCLI(r.t, "rebuild", "--network", network, "--data-dir", r.dataDir, "--cri-endpoint", r.cri.Endpoint())
	if res.Code != 0 {
		// A store that opens but has a damaged page: the runbook's repair is
		// a forced rebuild. It must not free what CRI does not list yet (the
		// sandboxes whose ADD is still in flight): their records are kept
		// where readable, their addresses reserved where not.
		r.t.Logf("rebuild refused:\n%s", res)
		res = runCLI(r.t, "rebuild", "--force", "--network", network, "--data-dir", r.dataDir, "--cri-endpoint", r.cri.Endpoint())
		if res.Code == 0 {
			// The rebuild keeps every readable record, also of sandboxes
			// deleted while their record sat behind the damaged page (DEL
			// exited 0 without reaching it): the running daemon's next sweep
			// reclaims those (netns gone), as it does any leak.
			if fi, err := os.Stat(r.path()); err == nil {
				r.sweep(fi)
			}
			if v := r.view(); v != nil {
				for _, o := range r.m.byRole(roleInFlight) {
					if o.Intact && !v.Keys[o.IP] {
						r.t.Errorf("rebuild --force freed %s, held by the in-flight sandbox %s", o.IP, o.ID)
					}
				}
			}
		}
	}
	if res.Code != 0 {
		r.t.Errorf("ADD is refused and rebuild failed:\n%s", res)
	}
}

// final: the store serves ADD, and holds exactly what the model says.
func (r *run) final() {
	const when = "at the end"
	if r.add(when) == nil {
		r.t.Errorf("%s: the store is not serviceable after the documented repair", when)
		return
	}
	v := r.view()
	if v == nil {
		r.t.Errorf("%s: the store cannot be read", when)
		return
	}
	r.checkLive(when, v)
	for _, o := range r.deleted {
		if o.Intact && len(v.heldBy(o.ID)) > 0 {
			r.t.Errorf("%s: %s was deleted (DEL exited 0) but holds %v", when, shortName(o.ID), v.heldBy(o.ID))
		}
	}
	owners := map[string][]netip.Addr{}
	for ip, rec := range v.Records {
		owners[rec.ContainerID] = append(owners[rec.ContainerID], ip)
	}
	for id, ips := range owners {
		// "" is no owner: addresses a rebuild keeps reserved because a
		// damaged page may have held their records.
		if id != "" && len(ips) > 1 {
			r.t.Errorf("%s: %s holds %d addresses %v in a one-range-set network", when, shortName(id), len(ips), ips)
		}
	}
	entries, _ := os.ReadDir(r.dataDir)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	r.t.Logf("%s: %d records, %d damaged kept, files %v", when, len(v.Records), len(v.Bad), files)
}
