package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hostlease/hostlease/internal/trustfs"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// This file is the sweep's observe stage: it reads the stores, CRI and the
// node. Each network's reading is a NetworkObservation (observeStore, then
// readAgain after a rebuild, then observeRecords); what it finds is logged
// by report.

// verifyEvery is how often (in sweeps) the derived indexes are verified
// against the records: every 10th sweep, 5 minutes at the default interval.
// The plugin verifies what it uses on every call; this finds what no call
// touched (a misfiled owner entry in a big store).
const verifyEvery = 10

// liveNetnsSample is how many READY sandboxes' netns a sweep looks for to
// tell whether --netns-dir is the runtime's.
const liveNetnsSample = 16

// observeStores takes a snapshot of every store under the data dir, one
// report per store holding its observation, and returns how many committed
// records written since the boot they hold (the last count of an unreadable
// store: what it held still makes an empty CRI answer implausible, as a
// rebuild from it would free live addresses).
func (s *Sweeper) observeStores(rep *SweepReport, boot, probe time.Time) (committed int) {
	files, err := FindStores(s.Opts.DataDir)
	rep.storesErr = err
	rep.DataDir = dataDirStatus(s.Opts.DataDir, len(files), err)
	s.syncStores(files)
	verify := s.sweeps%verifyEvery == 0
	s.sweeps++
	for _, f := range files {
		st := s.stores[f.Path]
		o := observeStore(f, st, verify, boot, probe)
		rep.Networks = append(rep.Networks, &NetworkReport{NetworkObservation: o})
		// Another error (environment, damaged page) says nothing of what
		// the store holds, and never leads to a rebuild: it counts nothing.
		if class := ErrorClass(o.ReadErr); class == "" || class == ClassUnreadable {
			committed += st.committed
		}
	}
	return committed
}

// observeStore reads one store and, when it reads whole, keeps in st what
// later sweeps need of it (the audit mark, the committed count, the range
// sets); a store that does not read keeps those of its last read.
func observeStore(f StoreFile, st *storeState, verify bool, boot, probe time.Time) NetworkObservation {
	o := NetworkObservation{Network: f.Network, Path: f.Path}
	o.Snapshot, o.ReadErr = readSnapshot(f.Path, &st.decoded, verify, st.auditMark)
	o.firstReadErr = o.ReadErr
	if n := o.Snapshot; n != nil && n.Network != "" && n.Network != f.Network && store.FilePath(filepath.Dir(f.Path), n.Network) == f.Path {
		// A name too long for a file name: the file's is shortened.
		// (A copy of another network's store keeps its file's name.)
		o.Network = n.Network
	}
	st.network = o.Network
	if o.ReadErr != nil {
		return o
	}
	st.auditMark = o.Snapshot.AuditLast
	st.committed = 0
	for _, r := range o.Snapshot.Records {
		if r.State == allocator.StateCommitted && !reclaim.PredatesBoot(r.Created, boot, probe) {
			st.committed++
		}
	}
	if sets := o.Snapshot.RangeSets; len(sets) > 0 {
		st.rangeSets = sets
	}
	return o
}

// readAgain is o with its store read again, after the rebuild stage replaced
// it (or found another process had): the sweep carries on with that read.
// What the first read found stays, for report and metrics.
func (o NetworkObservation) readAgain() NetworkObservation {
	o.Snapshot, o.ReadErr = ReadSnapshot(o.Path)
	return o
}

// observeCRI lists the sandboxes (reclaim.CRIView judges whether the answer can be
// trusted) and asks for the addresses of READY sandboxes that hold pending
// records, so those can be marked committed.
func (s *Sweeper) observeCRI(ctx context.Context, rep *SweepReport, committed int, now time.Time) []reclaim.PodSandbox {
	view, sandboxes := ListView(ctx, s.CRI, committed, now)
	rep.CRIReached = view.Complete || sandboxes != nil
	s.fillPendingIPs(ctx, &view, rep.Networks)
	rep.CRI = view
	return sandboxes
}

// fillPendingIPs asks CRI for the addresses of READY sandboxes that hold
// pending records. Other sandboxes need no status call.
func (s *Sweeper) fillPendingIPs(ctx context.Context, view *reclaim.CRIView, nets []*NetworkReport) {
	if !view.Complete {
		return
	}
	for _, nr := range nets {
		if nr.Snapshot == nil {
			continue
		}
		for _, r := range nr.Snapshot.Records {
			sb, ok := view.Sandboxes[r.ContainerID]
			if !ok || sb.State != reclaim.SandboxReady || r.State != allocator.StatePending || sb.IPs != nil {
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

// observeNode reads what the node says of each readable store's records
// (observeRecords) and returns the addresses READY sandboxes use.
func (s *Sweeper) observeNode(ctx context.Context, rep *SweepReport, sandboxes []reclaim.PodSandbox, boot, now time.Time) []reclaim.Use {
	dir := s.netnsDirView()
	holders := &netnsHolders{procDir: s.procDir()}
	var facts []reclaim.NetnsFacts
	for _, nr := range rep.Networks {
		if !nr.readable() {
			continue
		}
		var dryObs map[allocator.AllocationID]allocator.Observation
		if rep.DryRun {
			dryObs = s.stores[nr.Path].dryObs
		}
		nr.NetworkObservation = s.observeRecords(nr.NetworkObservation, rep.CRI, dryObs, dir, holders, boot, now)
		facts = append(facts, nr.netns)
	}
	rep.Netns = reclaim.NetnsProof(dir, facts)
	return s.sandboxUses(ctx, rep.CRI, sandboxes, rep.Networks)
}

// observeRecords is o with what the node says of its store's records:
// host-local reservation files, proofs of death; and, under --dry-run
// (dryObs not nil), each record with the observation the previous dry-run
// sweep decided (the store still holds an older one).
func (s *Sweeper) observeRecords(o NetworkObservation, view reclaim.CRIView, dryObs map[allocator.AllocationID]allocator.Observation, dir reclaim.NetnsDirView, holders *netnsHolders, boot, now time.Time) NetworkObservation {
	o.hostLocalGone = hostLocalFileGone(s.hostLocalDir(o.Network), o.Snapshot.Records)
	if dryObs != nil {
		snap := *o.Snapshot
		snap.Records = slices.Clone(snap.Records)
		for i, r := range snap.Records {
			if obs, ok := dryObs[r.ID()]; ok {
				cp := *r // records are shared with the decode cache: never modify them
				cp.Obs = obs
				snap.Records[i] = &cp
			}
		}
		o.Snapshot = &snap
	}
	o.netns, o.cands = s.candidates(o.Snapshot, view, dir, holders, boot, now)
	return o
}

// netnsDirView stats --netns-dir once for the sweep. A directory whose file
// handle cannot be read is unseen: its device and inode alone prove nothing
// (allocator.DirID), and the reason is the operator's to fix.
func (s *Sweeper) netnsDirView() reclaim.NetnsDirView {
	v := reclaim.NetnsDirView{Dir: s.Opts.NetnsDir}
	v.ID, v.Err = allocator.DirIDOf(v.Dir)
	if v.Err == nil && v.ID.Handle == "" {
		_, herr := allocator.ReadFileHandle(v.Dir)
		v.ID, v.Err = allocator.DirID{}, fmt.Errorf("no file handle (%v): its device and inode alone do not tell it from a directory or tmpfs made in its place; the daemon needs name_to_handle_at(2) (containerd 1.6.22/1.7.3 or later allow it under RuntimeDefault) and a filesystem that gives handles (tmpfs, ext4, xfs, btrfs)", herr)
	}
	return v
}

// candidates pairs each record CRI does not list with its proof of death, if
// any. A netns is judged only with positive evidence (netnsDoubt: the
// record's witness has --netns-dir's identity); a record written before the
// boot is proven dead unless its netns path still exists.
func (s *Sweeper) candidates(snap *Snapshot, view reclaim.CRIView, dir reclaim.NetnsDirView, holders *netnsHolders, boot, now time.Time) (reclaim.NetnsFacts, []reclaim.Candidate) {
	facts := reclaim.NetnsFacts{Evidence: map[allocator.NetnsEvidence]int{}}
	evidence := make([]allocator.NetnsEvidence, len(snap.Records))
	checked := 0
	for i, r := range snap.Records {
		e := allocator.NetnsEvidenceOf(r, dir.Dir, dir.ID)
		evidence[i] = e
		facts.Evidence[e]++
		switch e {
		case allocator.NetnsOtherDir:
			if !facts.OtherDir.Known() {
				facts.OtherDir = r.NetnsWitness.Dir
			}
		case allocator.NetnsElsewhere:
			if facts.Elsewhere == "" {
				facts.Elsewhere = r.Netns
			}
		case allocator.NetnsProvable:
			// A READY sandbox's netns cannot be gone: a few of them tell
			// whether the directory is still the runtime's (a handful of
			// lstats, not one per live record).
			if sb, listed := view.Sandboxes[r.ContainerID]; listed && sb.State == reclaim.SandboxReady && checked < liveNetnsSample {
				checked++
				if netnsMissing(r.Netns) {
					facts.LiveMissing++
				}
			}
		}
	}
	out := make([]reclaim.Candidate, len(snap.Records))
	// One goroutine: this runs every sweep, and spreading it over every CPU
	// would take them all from plugin calls at once (it runs on a node).
	for i, r := range snap.Records {
		c := reclaim.Candidate{Record: r, Evidence: evidence[i]}
		if _, listed := view.Sandboxes[r.ContainerID]; !listed && view.Complete {
			provable, doubt := reclaim.JudgeNetns(evidence[i], r, dir, facts.LiveMissing)
			if provable {
				// The path being gone proves nothing while something
				// still holds the namespace (allocator.NetnsGone).
				lerr := netnsLstat(r.Netns)
				if errors.Is(lerr, os.ErrNotExist) {
					held, herr := holders.get()
					ev, gone := allocator.NetnsGone(evidence[i], r, lerr, held, herr)
					c.NetnsGone = gone
					if !gone {
						jv := dir.JudgeView()
						jv.HoldersErr = herr
						doubt = ev.Doubt(r, jv)
					}
				}
			}
			c.NetnsDoubt = doubt
			if !c.NetnsGone && reclaim.PredatesBoot(r.Created, boot, now) {
				c.PredatesBoot = r.Netns == "" || !netnsExists(r.Netns)
			}
		}
		out[i] = c
	}
	return facts, out
}

// netnsHolders reads the namespaces something still holds
// (allocator.ReadNetnsHolders) at most once a sweep, and only when a record
// would be reclaimed as netns_gone.
type netnsHolders struct {
	procDir string
	read    bool
	held    allocator.NetnsHolders
	err     error
}

func (h *netnsHolders) get() (allocator.NetnsHolders, error) {
	if !h.read {
		h.held, h.err = allocator.ReadNetnsHolders(h.procDir)
		h.read = true
	}
	return h.held, h.err
}

// procDir is --proc-dir (DefaultProcDir when unset).
func (s *Sweeper) procDir() string {
	if s.Opts.ProcDir == "" {
		return DefaultProcDir
	}
	return s.Opts.ProcDir
}

// netnsLstat is the lstat of a netns path (its error).
func netnsLstat(path string) error {
	_, err := os.Lstat(path)
	return err
}

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
// file: a missing or wiped directory proves nothing about single containers;
// nor does one refused by trustfs's contract, which another user could
// change). Only then does a sweep write.
func hostLocalFileGone(dir string, recs []*allocator.Record) bool {
	var d *trustfs.Dir
	defer func() {
		if d != nil {
			d.Close()
		}
	}()
	for _, r := range recs {
		if r.Source != allocator.SourceHostLocal {
			continue
		}
		if d == nil {
			var err error
			if d, err = trustfs.OpenDir(dir); err != nil {
				return false
			}
			// host-local's DEL leaves its lock file; a wiped directory has
			// none and proves nothing (reclaim.ReleaseHostLocalGone's rule).
			if _, err := d.Lstat("lock"); err != nil {
				return false
			}
		}
		if _, err := d.Lstat(r.IP.String()); errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}
