package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Sweeper reconciles every store under the data dir with CRI. It keeps no store
// open between sweeps.
type Sweeper struct {
	Opts    *Options
	CRI     CRI
	Kube    *Kube // nil: no API server
	Metrics *Metrics
	Log     *slog.Logger
	Now     func() time.Time
	// Boot tells the node's boot time; nil reads <Opts.ProcDir>/stat.
	Boot BootClock

	mu sync.Mutex // one sweep at a time
	// exhaustSeen is the exhaustion count last exported per network and range set.
	exhaustSeen map[string]map[int]uint64
	// rangeCache keeps each store's range sets (by path), so a store that turns
	// unreadable can be rebuilt with only the addresses that belong to it.
	rangeCache map[string][]allocator.StoredRangeSet
	known      map[string]bool // networks whose metrics exist
	// dryObs holds, in dry-run, the observations a real sweep would have
	// stored, so misses accumulate across sweeps without writing the store.
	dryObs map[string]map[obsKey]allocator.Observation
	// decoded keeps each store's records (by path) as decoded last sweep, so a sweep
	// decodes only the records that changed since.
	decoded map[string]*store.RecordCache
	// infoWrites overrides MaxInfoWrites (tests).
	infoWrites int
	// bootErr is the last boot-time error logged, to log a new one once.
	bootErr string
	// lastCommitted is, by store path, how many committed records written
	// since the boot the store held when last read.
	lastCommitted map[string]int
	// sweeps counts sweeps, to verify the indexes every verifyEvery.
	sweeps int
	// statusIPs caches the addresses of READY sandboxes no record names, by
	// sandbox ID (see sandboxUses).
	statusIPs map[string][]netip.Addr
}

// bootTime is the node's boot time, or zero (no proof by boot) when it
// cannot be read.
func (s *Sweeper) bootTime() time.Time {
	clock := s.Boot
	if clock == nil {
		dir := s.Opts.ProcDir
		if dir == "" {
			dir = DefaultProcDir
		}
		clock = ProcBootClock{Dir: dir}
	}
	t, err := clock.BootTime()
	if err != nil {
		if msg := err.Error(); msg != s.bootErr {
			s.bootErr = msg
			s.Log.Warn("cannot read the node's boot time: records written before a reboot are reclaimed only by the rules without proof", "error", err)
		}
		return time.Time{}
	}
	s.bootErr = ""
	return t
}

func (s *Sweeper) maxInfoWrites() int {
	if s.infoWrites > 0 {
		return s.infoWrites
	}
	return MaxInfoWrites
}

// obsKey identifies one allocation (not just its address) across sweeps.
type obsKey struct {
	ip              netip.Addr
	container, ifc  string
	createdUnixNano int64
}

func keyOf(r *allocator.Record) obsKey {
	return obsKey{r.IP, r.ContainerID, r.IfName, r.Created.UnixNano()}
}

// NetworkReport is what a sweep did to one network.
type NetworkReport struct {
	Network   string
	Path      string
	Snapshot  *Snapshot
	Verdict   NetworkVerdict
	Reclaimed []*allocator.Record
	Committed int
	Rebuilt   string // where the unreadable store was set aside, when rebuilt
	// ReReserve is what the CRI → store reconciliation found (Reconcile);
	// ReReserved the re-reservations written.
	ReReserve  []ReReserve
	ReReserved []ReReserve
	// hostLocalGone is set when a record imported from host-local has lost
	// its reservation file; HostLocalReleased lists what the write released.
	hostLocalGone     bool
	HostLocalReleased []*allocator.Record
	// IndexRepair is the repair of the derived indexes this sweep made.
	IndexRepair allocator.IndexRepair
	Err         error
}

// SweepReport is the outcome of one sweep.
type SweepReport struct {
	Result   string // SweepOK, SweepCRIError or SweepStoreError
	CRI      CRIView
	API      APIView
	Networks []*NetworkReport
	Duration time.Duration
}

func (s *Sweeper) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC().Round(0)
	}
	return time.Now().UTC().Round(0)
}

// Sweep runs one reconciliation. The order matters: stores are read before CRI
// is listed, so every record the policy judges predates the CRI answer (a
// sandbox that finished setup is in it; one still in flight is covered by
// --min-age).
func (s *Sweeper) Sweep(ctx context.Context) *SweepReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	rep := &SweepReport{Result: SweepOK}
	files, err := FindStores(s.Opts.DataDir)
	if err != nil {
		s.Log.Error("cannot list stores", "dataDir", s.Opts.DataDir, "error", err)
		rep.Result = SweepStoreError
	}
	if !s.Opts.DryRun {
		// A plugin killed during a network's first use leaves its temporary
		// store behind; nothing else removes it.
		if removed, err := store.CleanStaleTemp(s.Opts.DataDir, store.StaleTempAge, time.Now()); len(removed) > 0 || err != nil {
			s.Log.Info("removed stale temporary store files", "files", removed, "error", err)
		}
	}
	// The boot time is read before CRI is listed: a committed record written
	// before the boot cannot belong to a sandbox CRI lists, so it does not
	// make an empty answer implausible.
	boot := s.bootTime()
	probe := s.now()
	if s.lastCommitted == nil {
		s.lastCommitted = map[string]int{}
	}
	verify := s.sweeps%verifyEvery == 0
	s.sweeps++
	committed := 0
	var unreadable []*NetworkReport
	for _, f := range files {
		nr := &NetworkReport{Network: f.Network, Path: f.Path}
		rep.Networks = append(rep.Networks, nr)
		nr.Snapshot, nr.Err = readSnapshot(f.Path, s.decodeCache(f.Path), verify)
		if n := nr.Snapshot; n != nil && n.Network != "" && n.Network != f.Network && store.FilePath(filepath.Dir(f.Path), n.Network) == f.Path {
			// A name too long for a file name: the file's is shortened.
			// (A copy of another network's store keeps its file's name.)
			nr.Network = n.Network
		}
		switch class := ErrorClass(nr.Err); class {
		case "":
			n := 0
			for _, r := range nr.Snapshot.Records {
				if r.State == allocator.StateCommitted && !PredatesBoot(r.Created, boot, probe) {
					n++
				}
			}
			committed += n
			s.lastCommitted[f.Path] = n
			s.cacheRanges(f.Path, nr.Snapshot.RangeSets)
			if len(nr.Snapshot.Damaged) > 0 {
				s.Log.Warn("store has damaged records: their addresses stay reserved; the healthy records are swept",
					"network", nr.Network, "damaged", len(nr.Snapshot.Damaged), "first", nr.Snapshot.Damaged[0].String())
			}
			if nr.Snapshot.RangeSetsErr != nil {
				s.Log.Warn("store's range sets do not decode (the next ADD rewrites them): no pool sizes this sweep", "network", nr.Network, "error", nr.Snapshot.RangeSetsErr)
			}
		case ClassUnreadable:
			unreadable = append(unreadable, nr)
			s.countStoreError(nr, class)
			// What it held when last read still makes an empty CRI answer
			// implausible: a rebuild from it would free live addresses.
			committed += s.lastCommitted[f.Path]
		case ClassEnvironment:
			// Says nothing about the store's content: never a reason to set
			// it aside or rebuild it. Looked at again next sweep.
			rep.Result = SweepStoreError
			s.countStoreError(nr, class)
			s.Log.Warn("store skipped this sweep: environment error (not damage; the store is left as it is)",
				"network", nr.Network, "errno", errnoOf(nr.Err), "error", nr.Err)
		case ClassDamagedPage:
			rep.Result = SweepStoreError
			s.countStoreError(nr, class)
			s.Log.Error("store has a damaged page: reclaiming nothing on this network; an operator rebuilds it (hostlease-gc rebuild --force)",
				"network", nr.Network, "error", nr.Err)
		default:
			rep.Result = SweepStoreError
			s.countStoreError(nr, class)
			s.Log.Warn("store skipped this sweep", "network", nr.Network, "error", nr.Err)
		}
	}
	s.forgetRemoved(files, rep.Networks)

	now := s.now()
	view, sandboxes := ListView(ctx, s.CRI, committed, now)
	rep.CRI = view
	if s.Metrics != nil {
		s.Metrics.SetCRIUp(view.Complete || sandboxes != nil)
	}
	if !view.Complete {
		rep.Result = SweepCRIError
		s.Log.Warn("reclaiming nothing this sweep: CRI answer not usable", "why", view.Why)
	}
	s.fillPendingIPs(ctx, &view, rep.Networks)

	for _, nr := range unreadable {
		s.rebuild(ctx, nr, view, sandboxes)
		if nr.Err != nil && rep.Result == SweepOK {
			rep.Result = SweepStoreError // not rebuilt although CRI answered
		}
	}

	for _, nr := range rep.Networks {
		if nr.Snapshot != nil && nr.Err == nil {
			nr.hostLocalGone = hostLocalFileGone(s.hostLocalDir(nr.Network), nr.Snapshot.Records)
		}
	}

	// CRI → store: every address a READY sandbox uses is held by it.
	uses := s.sandboxUses(ctx, view, sandboxes, rep.Networks)
	for _, nr := range rep.Networks {
		if nr.Snapshot != nil && nr.Err == nil {
			nr.ReReserve = Reconcile(uses, nr.Snapshot.Records, nr.Snapshot.Damaged, nr.Snapshot.RangeSets, view)
		}
	}

	if s.Opts.DryRun {
		s.overlayDryObs(rep.Networks)
	}

	// Decide without the API first; ask the API server only when something
	// would be reclaimed (it is the expensive, rarely needed check).
	api := APIView{}
	cands := make(map[*NetworkReport][]Candidate, len(rep.Networks))
	for _, nr := range rep.Networks {
		if nr.Snapshot != nil && nr.Err == nil {
			cands[nr] = s.candidates(nr.Snapshot, view, boot, now)
		}
	}
	decide := func() bool {
		any := false
		for _, nr := range rep.Networks {
			if nr.Snapshot == nil || nr.Err != nil {
				continue
			}
			nr.Verdict = Decide(PolicyFromOptions(s.Opts), cands[nr], nr.Snapshot.Held(), view, api, now)
			any = any || nr.Verdict.WouldReclaim > 0
		}
		return any
	}
	if decide() && s.Kube != nil {
		api = s.Kube.View(ctx)
		decide()
	}
	rep.API = api
	if s.Opts.DryRun {
		s.keepDryObs(rep.Networks)
	}

	for _, nr := range rep.Networks {
		if nr.Snapshot == nil || nr.Err != nil {
			continue
		}
		if !s.Opts.DryRun {
			if err := s.apply(nr, now); err != nil {
				nr.Err = err
				rep.Result = SweepStoreError
				s.countStoreError(nr, ErrorClass(err))
				s.Log.Error("could not apply sweep to store", "network", nr.Network, "class", ErrorClass(err), "errno", errnoOf(err), "error", err)
			}
		}
		s.report(ctx, nr, api)
	}
	rep.Duration = time.Since(start)
	if s.Metrics != nil {
		s.Metrics.ObserveSweep(rep.Result, rep.Duration, time.Now())
	}
	return rep
}

// overlayDryObs gives each record the observation the previous dry-run sweep
// decided (the store still holds the older one, as a dry run writes nothing).
func (s *Sweeper) overlayDryObs(nets []*NetworkReport) {
	for _, nr := range nets {
		seen := s.dryObs[nr.Network]
		if nr.Snapshot == nil || nr.Err != nil || seen == nil {
			continue
		}
		for i, r := range nr.Snapshot.Records {
			if o, ok := seen[keyOf(r)]; ok {
				cp := *r // records are shared with the decode cache: never modify them
				cp.Obs = o
				nr.Snapshot.Records[i] = &cp
			}
		}
	}
}

// keepDryObs remembers this dry-run sweep's observations for the next one.
func (s *Sweeper) keepDryObs(nets []*NetworkReport) {
	if s.dryObs == nil {
		s.dryObs = map[string]map[obsKey]allocator.Observation{}
	}
	for _, nr := range nets {
		if nr.Snapshot == nil || nr.Err != nil {
			continue
		}
		m := make(map[obsKey]allocator.Observation, len(nr.Verdict.Decisions))
		for _, d := range nr.Verdict.Decisions {
			m[keyOf(d.Record)] = d.Obs
		}
		s.dryObs[nr.Network] = m
	}
}

func (s *Sweeper) decodeCache(path string) *store.RecordCache {
	if s.decoded == nil {
		s.decoded = map[string]*store.RecordCache{}
	}
	c := s.decoded[path]
	if c == nil {
		c = &store.RecordCache{}
		s.decoded[path] = c
	}
	return c
}

func (s *Sweeper) cacheRanges(path string, sets []allocator.StoredRangeSet) {
	if len(sets) == 0 {
		return
	}
	if s.rangeCache == nil {
		s.rangeCache = map[string][]allocator.StoredRangeSet{}
	}
	s.rangeCache[path] = sets
}

// candidates pairs each record CRI does not list with its proof of death, if
// any. Only a netns path under a trusted --netns-dir (NetnsDirTrusted) is
// judged; a record written before the boot is proven dead unless its netns
// path still exists.
func (s *Sweeper) candidates(snap *Snapshot, view CRIView, boot, now time.Time) []Candidate {
	dir := s.Opts.NetnsDir
	facts := NetnsFacts{}
	if f, err := os.Open(dir); err == nil {
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			_, err := f.Readdirnames(1)
			facts.Visible = err == nil || errors.Is(err, io.EOF)
		}
		f.Close()
	}
	if facts.Visible {
		// A wrong mount hides every netns, so a few READY sandboxes tell: the
		// check costs a handful of lstats, not one per live record.
		checked := 0
		for _, r := range snap.Records {
			if checked == liveNetnsSample {
				break
			}
			if sb, listed := view.Sandboxes[r.ContainerID]; listed && sb.State == SandboxReady && netnsUnder(r.Netns, dir) {
				checked++
				if netnsMissing(r.Netns) {
					facts.LiveMissing++
				}
			}
		}
	}
	trusted := NetnsDirTrusted(facts)
	if facts.Visible && !trusted && facts.LiveMissing > 0 {
		s.Log.Warn("--netns-dir is not the runtime's: a READY sandbox's netns is missing there, so no missing netns counts as proof of death",
			"netnsDir", dir, "readySandboxesWithoutNetns", facts.LiveMissing)
	}
	out := make([]Candidate, len(snap.Records))
	// One goroutine: this runs every sweep, and spreading it over every CPU
	// would take them all from plugin calls at once (it runs on a node).
	for i, r := range snap.Records {
		c := Candidate{Record: r}
		if _, listed := view.Sandboxes[r.ContainerID]; !listed && view.Complete {
			if trusted && netnsUnder(r.Netns, dir) {
				c.NetnsGone = netnsMissing(r.Netns)
			}
			if !c.NetnsGone && PredatesBoot(r.Created, boot, now) {
				c.PredatesBoot = r.Netns == "" || !netnsExists(r.Netns)
			}
		}
		out[i] = c
	}
	return out
}

// verifyEvery is how often (in sweeps) the derived indexes are verified
// against the records: every 10th sweep, 5 minutes at the default interval.
// The plugin verifies what it uses on every call; this finds what no call
// touched (a misfiled owner entry in a big store).
const verifyEvery = 10

// liveNetnsSample is how many READY sandboxes' netns a sweep looks for to
// tell whether --netns-dir is the runtime's.
const liveNetnsSample = 16

// netnsMissing reports whether path provably does not exist (any other error
// proves nothing).
func netnsMissing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist)
}

// netnsExists reports whether path exists.
func netnsExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// fillPendingIPs asks CRI for the addresses of READY sandboxes that hold
// pending records, so those can be marked committed. Other sandboxes need no
// status call.
func (s *Sweeper) fillPendingIPs(ctx context.Context, view *CRIView, nets []*NetworkReport) {
	if !view.Complete {
		return
	}
	for _, nr := range nets {
		if nr.Snapshot == nil {
			continue
		}
		for _, r := range nr.Snapshot.Records {
			sb, ok := view.Sandboxes[r.ContainerID]
			if !ok || sb.State != SandboxReady || r.State != allocator.StatePending || sb.IPs != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, criTimeout)
			ips, err := s.CRI.SandboxIPs(cctx, sb.ID)
			cancel()
			if err != nil {
				s.Log.Debug("PodSandboxStatus failed", "sandbox", sb.ID, "error", err)
				continue
			}
			sb.IPs = ips
			view.Sandboxes[sb.ID] = sb
		}
	}
}

// apply writes one network's decisions in a single transaction. Each record is
// changed only if it is still the same allocation (same owner, same creation
// time): a plugin may have released and re-allocated the address since the
// snapshot, and that new allocation must not be touched.
//
// New values are encoded before the store is opened; under the exclusive lock
// a record still holding the bytes the snapshot saw is simply replaced (equal
// bytes prove it is the same allocation, unchanged), and only a record that
// changed since is decoded and checked again.
func (s *Sweeper) apply(nr *NetworkReport, now time.Time) error {
	plan := planWrites(nr.Snapshot, nr.Verdict, s.maxInfoWrites(), now)
	rereserve := slices.ContainsFunc(nr.ReReserve, func(rr ReReserve) bool { return !rr.Conflict })
	if len(plan) == 0 && !rereserve && !nr.hostLocalGone && !nr.Snapshot.Indexes.Changed() {
		// Nothing to store: no write transaction, so no exclusive lock and no
		// fdatasyncs (an empty bbolt commit still writes its meta page) that
		// plugin calls would wait behind.
		return nil
	}
	st, err := store.Open(nr.Path, store.OpenOptions{LockTimeout: storeLockTimeout})
	if err != nil {
		return err
	}
	defer st.Close()
	var reclaimed []*allocator.Record
	var stored []store.Rewrite
	var rereserved, hlReleased = []ReReserve(nil), []*allocator.Record(nil)
	var repair allocator.IndexRepair
	committed := 0
	err = st.Update(func(tx *store.Tx) error {
		reclaimed, stored, committed = nil, stored[:0], 0
		var err error
		if nr.Snapshot.Indexes.Changed() {
			// Records are the truth: the indexes are rebuilt from them first
			// (audited by the allocator), under this write lock.
			if repair, err = tx.RepairIndexes("hostlease-gc sweep", now); err != nil {
				return err
			}
		}
		if rereserved, err = applyReReserves(tx, nr.Network, nr.Snapshot.RangeSets, nr.ReReserve, now); err != nil {
			return err
		}
		if nr.hostLocalGone {
			if hlReleased, err = allocator.ReleaseVanishedHostLocal(tx, s.hostLocalDir(nr.Network), now); err != nil {
				return err
			}
		}
		for _, w := range plan {
			d := w.d
			if w.prepared {
				done, err := tx.PutIfUnchanged(w.rewrite)
				if err != nil {
					return err
				}
				if done {
					stored = append(stored, w.rewrite)
					if d.Action == MarkCommitted {
						committed++
					}
					continue
				}
			}
			cur, err := tx.Get(d.Record.IP)
			if err != nil || cur == nil || cur.ContainerID != d.Record.ContainerID || cur.IfName != d.Record.IfName || !cur.Created.Equal(d.Record.Created) {
				continue
			}
			switch d.Action {
			case Reclaim:
				if _, err := tx.Delete(cur.IP); err != nil {
					return err
				}
				if err := tx.Audit(allocator.AuditEvent{Time: now, Action: "reclaim", Reason: d.Reason + ": " + d.Detail,
					IP: cur.IP, ContainerID: cur.ContainerID, IfName: cur.IfName, Pod: cur.PodRef(), By: "hostlease-gc"}); err != nil {
					return err
				}
				reclaimed = append(reclaimed, cur)
				continue
			case MarkCommitted:
				cur.State, cur.Committed = allocator.StateCommitted, now
				committed++
			default:
				if cur.Obs == d.Obs {
					continue
				}
			}
			cur.Obs = d.Obs
			if err := tx.Put(cur); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		nr.Reclaimed, nr.Committed, nr.ReReserved, nr.HostLocalReleased, nr.IndexRepair = reclaimed, committed, rereserved, hlReleased, repair
		// What was just written need not be decoded again next sweep.
		cache := s.decodeCache(nr.Path)
		for _, w := range stored {
			cache.Stored(w)
		}
	}
	return err
}

// plannedWrite is one decision that changes the store, with the record's new
// value when it could be encoded ahead of the write transaction.
type plannedWrite struct {
	d        *Decision
	seen     int // index of the record in the snapshot
	rewrite  store.Rewrite
	prepared bool
}

// planWrites lists the decisions to store (see Writes), in order, and encodes
// the new value of each record that is kept or marked committed (on every CPU
// when there are many, as on a daemon's first sweep). A reclaim, or a record
// the snapshot cannot vouch for, is left to the write transaction's look at
// the record as it is then.
func planWrites(snap *Snapshot, v NetworkVerdict, maxInfo int, now time.Time) []plannedWrite {
	var plan []plannedWrite
	for _, i := range Writes(v.Decisions, maxInfo) {
		plan = append(plan, plannedWrite{d: &v.Decisions[i], seen: i})
	}
	inParallel(len(plan), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			w := &plan[j]
			d, i := w.d, w.seen
			// Decide keeps the snapshot's order; the pointer check guards that.
			if d.Action == Reclaim || i >= len(snap.seen) || snap.seen[i].Rec != d.Record {
				continue
			}
			next := *d.Record // records are shared with the decode cache: never modify them
			next.Obs = d.Obs
			if d.Action == MarkCommitted {
				next.State, next.Committed = allocator.StateCommitted, now
			}
			var err error
			w.rewrite, err = store.PrepareRewrite(snap.seen[i], &next)
			w.prepared = err == nil
		}
	})
	return plan
}

// parallelMin is the least number of items worth splitting over goroutines.
const parallelMin = 1024

// inParallel calls fn over [0, n) split into contiguous parts, one goroutine
// per CPU when n is large, and returns when all are done.
func inParallel(n int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/(parallelMin/2))
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { fn(w*n/workers, (w+1)*n/workers) })
	}
	wg.Wait()
}

// report exports a network's gauges and counters, logs what happened and
// posts Events for reclaims and refused sweeps.
func (s *Sweeper) report(ctx context.Context, nr *NetworkReport, api APIView) {
	log := s.Log.With("network", nr.Network)
	candidates := 0
	for _, d := range nr.Verdict.Decisions {
		if d.Candidate {
			candidates++
		}
	}
	for _, r := range nr.Reclaimed {
		d := decisionFor(nr.Verdict, r)
		log.Info("reclaimed address", "ip", r.IP, "sandbox", r.ContainerID, "ifname", r.IfName, "pod", r.PodRef(), "reason", d.Reason, "detail", d.Detail, "dryRun", false)
		msg := fmt.Sprintf("hostlease-gc reclaimed %s (network %s) from sandbox %s: %s", r.IP, nr.Network, short(r.ContainerID), d.Detail)
		if err := s.Kube.Event(ctx, api, r, "Normal", "AddressReclaimed", msg); err != nil {
			log.Warn("could not post Event", "error", err)
		}
	}
	s.reportReReserves(ctx, log, nr, api)
	if r := nr.IndexRepair; r.Changed() {
		log.Warn("derived indexes disagreed with the records and were rebuilt from them",
			"records", r.Records, "bitsSet", r.BitsSet, "bitsCleared", r.BitsCleared,
			"ownerAdded", r.OwnerAdded, "ownerRemoved", r.OwnerRemoved, "countWas", r.CountWas)
	}
	for _, r := range nr.HostLocalReleased {
		log.Info("released address imported from host-local: its reservation file was removed (host-local DEL by a runtime with a cached host-local config)",
			"ip", r.IP, "container", r.ContainerID, "ifname", r.IfName)
	}
	if s.Opts.DryRun {
		for _, d := range nr.Verdict.Decisions {
			if d.Action == Reclaim {
				log.Info("would reclaim address (dry run)", "ip", d.Record.IP, "sandbox", d.Record.ContainerID, "pod", d.Record.PodRef(), "reason", d.Reason, "detail", d.Detail)
			}
		}
	}
	if nr.Verdict.Guarded {
		log.Error("MASS-RECLAIM GUARD: refusing to reclaim without proof of death; a person must look (hostlease-gc leaks)",
			"wouldReclaim", nr.Verdict.WouldReclaim, "limit", nr.Verdict.GuardLimit, "records", nr.Snapshot.Held(),
			"maxFraction", s.Opts.MaxReclaimFraction, "provenReclaims", nr.Verdict.Proven, "dryRun", s.Opts.DryRun)
	}
	if nr.Verdict.Guarded && !s.Opts.DryRun { // `leaks` (a dry run) posts no Events
		if err := s.Kube.Event(ctx, api, nil, "Warning", "MassReclaimRefused",
			fmt.Sprintf("hostlease-gc refused to reclaim %d addresses of network %s at once without proof of death (limit %d of its %d records)",
				nr.Verdict.WouldReclaim, nr.Network, nr.Verdict.GuardLimit, nr.Snapshot.Held())); err != nil {
			log.Warn("could not post Event", "error", err)
		}
	}
	m := s.Metrics
	if m == nil {
		return
	}
	s.initNetwork(nr)
	pending, committedN := 0, 0
	reclaimed := make(map[netip.Addr]bool, len(nr.Reclaimed))
	for _, r := range nr.Reclaimed {
		reclaimed[r.IP] = true
	}
	for _, d := range nr.Verdict.Decisions {
		switch {
		case reclaimed[d.Record.IP]:
		case d.Record.State == allocator.StateCommitted || d.Action == MarkCommitted && !s.Opts.DryRun:
			committedN++
		default:
			pending++
		}
		if d.Reason == "vetoed" {
			m.Vetoes.WithLabelValues(nr.Network, VetoPodListsIP).Inc()
		}
	}
	for _, rr := range nr.ReReserved {
		if rr.Reason != ReReserveOtherOwner { // a new record (a replaced one was counted)
			committedN++
		}
	}
	m.SetAllocations(nr.Network, pending, committedN)
	m.DamagedRecords.WithLabelValues(nr.Network).Set(float64(len(nr.Snapshot.Damaged)))
	for _, rr := range nr.ReReserved {
		m.AddressesReReserved.WithLabelValues(nr.Network, rr.Reason).Inc()
	}
	for _, rr := range nr.ReReserve {
		if rr.Conflict {
			m.AddressConflicts.WithLabelValues(nr.Network).Inc()
		}
	}
	m.SetLeakCandidates(nr.Network, candidates-len(nr.Reclaimed))
	for _, r := range nr.Reclaimed {
		m.Reclaims.WithLabelValues(nr.Network, decisionFor(nr.Verdict, r).Reason).Inc()
	}
	m.Reclaims.WithLabelValues(nr.Network, ReclaimHostLocalGone).Add(float64(len(nr.HostLocalReleased)))
	if nr.IndexRepair.Changed() {
		m.IndexRepairs.WithLabelValues(nr.Network).Inc()
	}
	if nr.Verdict.Guarded {
		m.ReclaimGuardTripped.WithLabelValues(nr.Network).Inc()
		m.Vetoes.WithLabelValues(nr.Network, VetoMassReclaimGuard).Add(float64(nr.Verdict.WouldReclaim))
	}
	pools := make([]PoolStats, 0, len(nr.Snapshot.Usage))
	for _, u := range nr.Snapshot.Usage {
		size, _ := u.Size.Float64()
		used := u.Used
		for _, rr := range nr.ReReserved {
			if rs, _, ok := rangeOf(nr.Snapshot.RangeSets, rr.IP); ok && rs == u.RangeSet && rr.Reason == ReReserveUnrecorded {
				used++
			}
		}
		for _, r := range slices.Concat(nr.Reclaimed, nr.HostLocalReleased) {
			if r.RangeSet == u.RangeSet {
				used--
			}
		}
		pools = append(pools, PoolStats{RangeSet: strconv.Itoa(u.RangeSet), Size: clampInt(size), Free: clampInt(size - float64(used))})
	}
	m.SetPool(nr.Network, pools)
	if s.exhaustSeen == nil {
		s.exhaustSeen = map[string]map[int]uint64{}
	}
	if s.exhaustSeen[nr.Network] == nil {
		s.exhaustSeen[nr.Network] = map[int]uint64{}
	}
	for idx, e := range nr.Snapshot.Exhaustions {
		seen := s.exhaustSeen[nr.Network][idx]
		delta := uint64(0)
		if e.Count >= seen {
			delta = e.Count - seen
		} else {
			delta = e.Count // the store was rebuilt and counts restarted
		}
		m.RecordExhaustion(nr.Network, strconv.Itoa(idx), int(delta), e.Last)
		s.exhaustSeen[nr.Network][idx] = e.Count
	}
}

// forgetRemoved drops the metric series and per-network state of networks
// whose store is gone (the network was removed from the node), so a pool
// that was exhausted when it was removed does not keep alerts firing.
func (s *Sweeper) forgetRemoved(files []StoreFile, nets []*NetworkReport) {
	paths := make(map[string]bool, len(files))
	for _, f := range files {
		paths[f.Path] = true
	}
	for path := range s.decoded {
		if !paths[path] {
			delete(s.decoded, path)
			delete(s.rangeCache, path)
			delete(s.lastCommitted, path)
		}
	}
	present := make(map[string]bool, len(nets))
	for _, nr := range nets {
		present[nr.Network] = true
	}
	for network := range s.known {
		if present[network] {
			continue
		}
		delete(s.known, network)
		delete(s.exhaustSeen, network)
		delete(s.dryObs, network)
		if s.Metrics != nil {
			s.Metrics.DeleteNetwork(network)
		}
		s.Log.Info("store gone: network forgotten", "network", network)
	}
}

func (s *Sweeper) initNetwork(nr *NetworkReport) {
	if s.known == nil {
		s.known = map[string]bool{}
	}
	if s.known[nr.Network] {
		return
	}
	s.known[nr.Network] = true
	var sets []string
	for i := range nr.Snapshot.RangeSets {
		sets = append(sets, strconv.Itoa(i))
	}
	s.Metrics.InitNetwork(nr.Network, sets...)
}

func decisionFor(v NetworkVerdict, r *allocator.Record) Decision {
	for _, d := range v.Decisions {
		if d.Record.IP == r.IP {
			return d
		}
	}
	return Decision{}
}

func clampInt(f float64) int {
	const maxInt = float64(1<<62 - 1)
	return int(min(max(f, 0), maxInt))
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

// hostLocalDir is where host-local keeps the network's state, by the plugin's
// rule: beside the stores when the ipam dataDir is set, else host-local's
// default.
func (s *Sweeper) hostLocalDir(network string) string {
	base := s.Opts.DataDir
	if filepath.Clean(base) == allocator.DefaultStoreDir {
		base = allocator.DefaultHostLocalDir
	}
	return allocator.HostLocalDir(base, network)
}

// hostLocalFileGone reports whether a record imported from host-local has
// lost its reservation file in dir (which must exist with host-local's lock
// file: a missing or wiped directory proves nothing about single containers).
// Only then does a sweep write.
func hostLocalFileGone(dir string, recs []*allocator.Record) bool {
	checked := false
	for _, r := range recs {
		if r.Source != allocator.SourceHostLocal {
			continue
		}
		if !checked {
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return false
			}
			// host-local's DEL leaves its lock file; a wiped directory has
			// none and proves nothing (ReleaseVanishedHostLocal's rule).
			if _, err := os.Lstat(filepath.Join(dir, "lock")); err != nil {
				return false
			}
			checked = true
		}
		if _, err := os.Lstat(filepath.Join(dir, r.IP.String())); errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}
