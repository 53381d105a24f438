package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// Sweeper reconciles every store under the data dir with CRI. It keeps no store
// open between sweeps.
//
// A sweep is a pipeline of plain values (docs/architecture.md, "The path of
// a sweep"). Each network's part is one value per stage, held together in
// its NetworkReport; a stage's functions take the earlier stages' values and
// return their own, and never write into another stage's:
//   - observe (observe.go) returns each network's NetworkObservation: the
//     store's snapshot and read error, then what the node's netns and
//     host-local files say of its records; with them the node-wide views
//     (CRI, the netns proof, then the API server when a reclaim could be
//     vetoed);
//   - decide (decide.go) returns its NetworkDecision, pkg/reclaim's pure
//     functions of the observation, --dry-run and the clock: the rebuild,
//     the verdict, the re-reservations and the plan of writes;
//   - act (act.go) returns its NetworkOutcome: the rebuild and the writes
//     the decision holds (a dry run's holds none), and the write's error;
//   - report (report.go: logs and Events; metrics.go: the collector that
//     exports the last report) reads all three.
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
	// stores is the state kept of each store between sweeps, by path.
	stores map[string]*storeState
	// infoWrites overrides reclaim.MaxInfoWrites (tests).
	infoWrites int
	// bootErr is the last boot-time error logged, to log a new one once.
	bootErr string
	// sweeps counts sweeps, to verify the indexes every verifyEvery.
	sweeps int
	// netnsLogged is the netns proof state last logged, to log a change once.
	netnsLogged string
	// statusIPs caches the addresses of READY sandboxes no record names, by
	// sandbox ID (see sandboxUses).
	statusIPs map[string][]netip.Addr
}

// storeState is what the sweeper keeps of one store between sweeps. It is
// created when a sweep first finds the store and deleted when a sweep no
// longer finds it (syncStores), and nowhere else.
type storeState struct {
	network string // as last read, for the log line when it is forgotten
	// decoded keeps the records as decoded last sweep, so a sweep decodes
	// only the records that changed since.
	decoded store.RecordCache
	// rangeSets are the range sets last read, so a store that turns
	// unreadable is rebuilt with only the addresses that belong to it.
	rangeSets []allocator.StoredRangeSet
	// committed is how many committed records written since the boot the
	// store held when last read.
	committed int
	// auditMark is the last audit sequence read (each plugin release is
	// reported once; the store also keeps the last one reported, for the
	// daemon's next start).
	auditMark uint64
	// unposted are plugin releases whose Event could not be posted: posted
	// again each sweep until they are (report.go). While any is left, or
	// some were dropped (unpostedDropped), the store's reported mark is not
	// moved, so a restarted daemon reports them again.
	unposted        []allocator.AuditEvent
	unpostedDropped bool
	// dryObs holds, under --dry-run, the observations a real sweep would
	// have stored, so misses accumulate across sweeps without writing.
	// The key is the allocation (not just its address).
	dryObs map[allocator.AllocationID]allocator.Observation
}

// SweepReport is one sweep: what it observed, decided and did, node-wide and
// network by network.
type SweepReport struct {
	Result string // SweepOK, SweepCRIError or SweepStoreError (sweepResult)
	DryRun bool
	CRI    reclaim.CRIView
	// CRIReached: ListPodSandbox answered (even if implausibly).
	CRIReached bool
	API        reclaim.APIView
	// Netns is the node-wide verdict on the netns proof (reclaim.NetnsProof).
	Netns reclaim.NetnsProofStatus
	// DataDir is what the sweep found at --data-dir.
	DataDir  DataDirStatus
	Networks []*NetworkReport
	Duration time.Duration

	storesErr error // observed: the data dir could not be listed
	// cleanTemp (decided): remove plugins' stale temporary stores (not in a
	// dry run); tempRemoved and tempErr (done) say what that did.
	cleanTemp   bool
	tempRemoved []string
	tempErr     error
}

// NetworkReport is one network's part of a sweep: one value per stage, each
// the return value of that stage's functions, which take the earlier stages'
// values and never write into them.
type NetworkReport struct {
	NetworkObservation
	NetworkDecision
	NetworkOutcome
}

// NetworkObservation is what the observe stage read of one network: its
// store and what the node says of the store's records.
type NetworkObservation struct {
	Network string
	Path    string
	// Snapshot is the store as the sweep decides on it: as read or, once
	// the rebuild stage replaced it, as read again (nil: not read).
	Snapshot *Snapshot
	// ReadErr is the error of the read Snapshot comes from (nil: Snapshot
	// holds the store).
	ReadErr error
	// firstReadErr is the error of the sweep's first read of the store,
	// which report logs and metrics count: ReadErr, unless the store was
	// read again after the rebuild stage.
	firstReadErr  error
	cands         []reclaim.Candidate
	netns         reclaim.NetnsFacts
	hostLocalGone bool // a record imported from host-local lost its file
}

// NetworkDecision is what the decide stage made of one network's
// observation, with pkg/reclaim's functions.
type NetworkDecision struct {
	rebuild bool // set the unreadable store aside and rebuild it
	Verdict reclaim.Verdict
	// ReReserve is what the CRI → store reconciliation found (reclaim.Reconcile).
	ReReserve []reclaim.ReReserve
	plan      reclaim.Plan // what act writes (empty in a dry run)
	// prepared[j] is plan.Writes[j]'s record encoded ahead of the write.
	prepared []preparedWrite
}

// NetworkOutcome is what the act stage did to one network's store.
type NetworkOutcome struct {
	Rebuilt    string // where the unreadable store was set aside, when rebuilt
	rebuiltN   int    // records the rebuilt store holds
	rebuildErr error  // why the planned rebuild failed
	Reclaimed  []ReclaimedRecord
	Committed  int
	ReReserved []reclaim.ReReserve
	// HostLocalReleased lists the records imported from host-local whose
	// reservation file was removed, released by this sweep.
	HostLocalReleased []*allocator.Record
	// IndexRepair is the repair of the derived indexes this sweep made.
	IndexRepair allocator.IndexRepair
	// WriteErr is why the plan could not be written (nil: written, or
	// nothing to write); the transaction wrote nothing then.
	WriteErr error
}

// ReclaimedRecord is one address a sweep released, as the record was under
// the write lock, with the decision's reason.
type ReclaimedRecord struct {
	*allocator.Record
	Reason reclaim.Reason
	Detail string
}

// Err is the error that kept the sweep from reading the store or, once it
// had decided, from writing it (nil: neither).
func (nr *NetworkReport) Err() error {
	if nr.WriteErr != nil {
		return nr.WriteErr
	}
	return nr.ReadErr
}

// storeErrors are the store errors the sweep met on the network (read,
// write), for metrics.
func (nr *NetworkReport) storeErrors() []storeError {
	var out []storeError
	for _, err := range []error{nr.firstReadErr, nr.WriteErr} {
		if err != nil {
			out = append(out, storeError{ErrorClass(err), errnoOf(err)})
		}
	}
	return out
}

// readable reports whether the store was read whole (the read Snapshot
// comes from failed on nothing): the sweep decided on it, and a failed write
// (the outcome's WriteErr) leaves it so.
func (o *NetworkObservation) readable() bool { return o.Snapshot != nil && o.ReadErr == nil }

func (s *Sweeper) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC().Round(0)
	}
	return time.Now().UTC().Round(0)
}

// Sweep runs one reconciliation. The order matters: stores are read before CRI
// is listed, so every record the policy judges predates the CRI answer (a
// sandbox that finished setup is in it; one still in flight is covered by
// --min-age). An unreadable store is rebuilt (when the decision says so) and
// read again before the rest is observed, so the rebuilt store is swept like
// the others. The result (sweepResult) is worked out once the sweep acted.
func (s *Sweeper) Sweep(ctx context.Context) *SweepReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	rep := &SweepReport{DryRun: s.Opts.DryRun}
	pol := PolicyFromOptions(s.Opts)

	// The boot time is read before CRI is listed: a committed record written
	// before the boot cannot belong to a sandbox CRI lists, so it does not
	// make an empty answer implausible.
	boot := s.bootTime()
	committed := s.observeStores(rep, boot, s.now())
	now := s.now()
	sandboxes := s.observeCRI(ctx, rep, committed, now)
	planStores(rep)
	s.rebuildStores(ctx, rep, sandboxes)
	uses := s.observeNode(ctx, rep, sandboxes, boot, now)

	judgeNetworks(rep, uses, pol, now)
	if needsAPI(rep) && s.Kube != nil {
		// The API server is asked only when a reclaim it could veto is due.
		rep.API = s.Kube.View(ctx)
	}
	settleNetworks(rep, pol, s.maxInfoWrites(), now)
	s.rememberDryRun(rep)

	// Act and report go network by network: a network's logs and Events
	// follow its own write, and a daemon stopped part-way (a deleted pod)
	// leaves the later networks exactly as observed, for the next sweep.
	rep.tempRemoved, rep.tempErr = s.cleanTemp(rep.cleanTemp)
	s.reportSweep(rep)
	for _, nr := range rep.Networks {
		nr.NetworkOutcome = s.act(&nr.NetworkObservation, &nr.NetworkDecision, nr.NetworkOutcome, now)
		s.report(ctx, rep, nr)
	}
	rep.Result = sweepResult(rep)
	rep.Duration = time.Since(start)
	if s.Metrics != nil {
		s.Metrics.Observe(rep, time.Now())
	}
	return rep
}

// sweepResult is a sweep's result from its stages' values: a store that
// could not be written makes it SweepStoreError; else a CRI answer not usable
// makes it SweepCRIError; else the data dir not listed, or a store not read
// (an unreadable one not rebuilt and read again), SweepStoreError.
func sweepResult(rep *SweepReport) string {
	read := rep.storesErr == nil
	for _, nr := range rep.Networks {
		if nr.WriteErr != nil {
			return SweepStoreError
		}
		if nr.firstReadErr != nil && (ErrorClass(nr.firstReadErr) != ClassUnreadable || nr.ReadErr != nil) {
			read = false
		}
	}
	switch {
	case !rep.CRI.Complete:
		return SweepCRIError
	case !read:
		return SweepStoreError
	}
	return SweepOK
}

// syncStores creates the state of each store found and deletes that of each
// store gone (the network was removed from the node).
func (s *Sweeper) syncStores(files []StoreFile) {
	if s.stores == nil {
		s.stores = map[string]*storeState{}
	}
	found := make(map[string]bool, len(files))
	for _, f := range files {
		found[f.Path] = true
		if s.stores[f.Path] == nil {
			s.stores[f.Path] = &storeState{network: f.Network}
		}
	}
	for path, st := range s.stores {
		if !found[path] {
			delete(s.stores, path)
			s.Log.Info("store gone: network forgotten", "network", st.network)
		}
	}
}

// rememberDryRun keeps, under --dry-run, this sweep's observations for the
// next one (a real sweep stores them in the records).
func (s *Sweeper) rememberDryRun(rep *SweepReport) {
	if !rep.DryRun {
		return
	}
	for _, nr := range rep.Networks {
		if !nr.readable() {
			continue
		}
		m := make(map[allocator.AllocationID]allocator.Observation, len(nr.Verdict.Decisions))
		for _, d := range nr.Verdict.Decisions {
			m[d.Record.ID()] = d.Obs
		}
		s.stores[nr.Path].dryObs = m
	}
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
	return reclaim.MaxInfoWrites
}
