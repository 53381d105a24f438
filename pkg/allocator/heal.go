package allocator

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"time"
)

// Audit reasons (AuditEvent.Reason, Action AuditRelease, By "plugin") of the
// plugin's releases of sandboxes whose netns the runtime has torn down. The
// daemon reports each once (metric, pod Event; pkg/daemon).
const (
	// ReasonPodSandboxReplaced: an ADD for a pod found another sandbox of
	// the same pod UID whose netns is provably gone (a retry, a restart).
	ReasonPodSandboxReplaced = "pod_sandbox_replaced"
	// ReasonNetnsGoneAtExhaustion: an ADD found its range set full and freed
	// a record whose netns is provably gone before choosing again.
	ReasonNetnsGoneAtExhaustion = "netns_gone_at_exhaustion"
)

// PluginReasons are the audit reasons of releases the plugin decides.
var PluginReasons = []string{ReasonPodSandboxReplaced, ReasonNetnsGoneAtExhaustion}

// PluginReleases is the plugin's whole rule for freeing a record it does not
// own at ADD: the reason to release r, or "" to keep it. add is the ADD's
// owner; exhausted says the ADD found its range set full; ev is r's netns
// evidence from the ADD's view (NetnsEvidenceOf, judged in the directory of
// the ADD's own netns, then NetnsGone) and netnsErr the lstat of r's netns
// there.
//
// A record is released only when its netns is torn down as the plugin sees
// it: the evidence is NetnsProvable and the path is absent (ENOENT; any
// other error is doubt), and nothing holds its namespace (the caller
// applies NetnsGone: NetnsHeld or NetnsHoldersUnseen keep it). Then it goes
// when it is another sandbox of the ADD's own pod (same non-empty pod UID,
// another container ID), or, on an exhausted range set, whoever held it. The ADD's own container and records
// imported from host-local are never released here.
func PluginReleases(r *Record, add Owner, exhausted bool, ev NetnsEvidence, netnsErr error) string {
	switch {
	case r.ContainerID == add.ContainerID, r.Source == SourceHostLocal:
		return ""
	case ev != NetnsProvable || !errors.Is(netnsErr, fs.ErrNotExist):
		return ""
	case add.PodUID != "" && r.PodUID == add.PodUID:
		return ReasonPodSandboxReplaced
	case exhausted:
		return ReasonNetnsGoneAtExhaustion
	}
	return ""
}

// deathJudge applies PluginReleases for one ADD, with its I/O: the ADD's
// netns directory's identity read once, an lstat only for a record the rule
// would release if its netns were gone, and the namespaces still held read
// once, only when a record's netns path is gone (the walk of /proc is the
// costly part: an ADD that releases nothing never makes it). The ADD's own
// namespace is never among those held for another record: it is the new
// sandbox's, and a record naming its identity names an earlier namespace
// whose inode number the kernel gave to it.
type deathJudge struct {
	view NetnsView
	add  Owner
	dir  string // the ADD's netns directory; "" judges nothing
	id   DirID
	read bool
	// holders, holdersErr: the namespaces still held (holdersRead: read).
	holders     NetnsHolders
	holdersErr  error
	holdersRead bool
	freed       int
	// scanned: releaseDead ran (once per ADD: a second full range set
	// finds nothing more to free).
	scanned bool
	// walk: the walk is made outside the transaction (HoldersWalk); nil
	// walks inside it.
	walk *HoldersWalk
}

// HoldersWalk lets an ADD read the namespaces still held (the walk of /proc,
// the judge's costly part) with the store unlocked, so that concurrent ADDs
// of the network do not wait for it. Given in AllocateRequest with Read
// false, Allocate makes no walk: a record whose release waits on one is kept
// and named in Needed, and the caller must roll that transaction back. The
// caller then reads Holders and Err with the store's lock released, sets
// Read, and runs the ADD again in a new transaction with the same
// HoldersWalk. There the walk is evidence only for the records in Needed:
// each existed, as the same allocation (AllocationID), and had its netns
// path gone before the walk began, and its path must still be gone. Any other
// record whose release waits on a walk gets one inside the transaction, as
// without a HoldersWalk.
type HoldersWalk struct {
	Needed  map[AllocationID]bool
	Read    bool
	Holders NetnsHolders
	Err     error
}

// Deferred says the transaction Allocate ran kept records until a walk and
// must be rolled back (HoldersWalk).
func (w *HoldersWalk) Deferred() bool { return w != nil && !w.Read && len(w.Needed) > 0 }

func newDeathJudge(view NetnsView, add Owner, walk *HoldersWalk) *deathJudge {
	j := &deathJudge{view: view, add: add, walk: walk}
	if view != nil && NamedNetns(add.Netns) {
		j.dir = filepath.Dir(filepath.Clean(add.Netns))
	}
	return j
}

// reason is PluginReleases for r (""-keep when the judge has no view).
func (j *deathJudge) reason(r *Record, exhausted bool) string {
	if j.dir == "" {
		return ""
	}
	if !j.read {
		j.id, _ = j.view.DirID(j.dir) // zero on error: NetnsDirUnseen
		j.read = true
	}
	ev := NetnsEvidenceOf(r, j.dir, j.id)
	if PluginReleases(r, j.add, exhausted, ev, fs.ErrNotExist) == "" {
		return "" // kept whatever the lstat says: no I/O
	}
	lerr := j.view.Lstat(filepath.Clean(r.Netns))
	if PluginReleases(r, j.add, exhausted, ev, lerr) == "" {
		return ""
	}
	held, heldErr, ok := j.holdersFor(r)
	if !ok {
		return "" // kept in this transaction: its fate waits on the walk
	}
	ev, _ = NetnsGone(ev, r, lerr, held, heldErr)
	return PluginReleases(r, j.add, exhausted, ev, lerr)
}

// holdersFor is the namespaces still held, as evidence for r: the walk made
// outside the transaction when r is one it was made for, else one made
// inside it (once per ADD). ok false: r waits on a walk still to be made
// (HoldersWalk, first transaction).
func (j *deathJudge) holdersFor(r *Record) (held NetnsHolders, err error, ok bool) {
	w := j.walk
	if w != nil && !w.Read {
		if w.Needed == nil {
			w.Needed = map[AllocationID]bool{}
		}
		w.Needed[r.ID()] = true
		return nil, nil, false
	}
	if w != nil && w.Needed[r.ID()] {
		held, err = w.Holders, w.Err
	} else {
		if !j.holdersRead {
			j.holders, j.holdersErr = j.view.Holders()
			j.holdersRead = true
		}
		held, err = j.holders, j.holdersErr
	}
	// The ADD's own namespace is its new sandbox's: the kernel gives a freed
	// namespace's inode number to the next one (a pod's retry gets its dead
	// attempt's number back at once), so a record naming it names a
	// namespace that died. Both sets are this ADD's own to change.
	delete(held, j.add.NetnsWitness.Netns)
	return held, err, true
}

// releaseReplaced frees the ADD's pod's other sandboxes whose netns is torn
// down (one pod index seek; ReasonPodSandboxReplaced).
func (j *deathJudge) releaseReplaced(tx Store, now time.Time) error {
	if j.dir == "" || j.add.PodUID == "" {
		return nil
	}
	recs, err := tx.Records(Query{PodUID: j.add.PodUID})
	if err != nil {
		return err
	}
	return j.release(tx, recs, false, now)
}

// releaseDead frees every record of the store whose netns is torn down (an
// exhausted range set; reads every record) and reports how many it freed.
func (j *deathJudge) releaseDead(tx Store, now time.Time) (int, error) {
	if j.dir == "" || j.scanned {
		return 0, nil
	}
	j.scanned = true
	recs, err := tx.Records(Query{})
	if err != nil {
		return 0, err
	}
	before := j.freed
	err = j.release(tx, recs, true, now)
	return j.freed - before, err
}

func (j *deathJudge) release(tx Store, recs []*Record, exhausted bool, now time.Time) error {
	for _, r := range recs {
		reason := j.reason(r, exhausted)
		if reason == "" {
			continue
		}
		ev := auditEntry(r.IP, r.Attachment(), r.PodRef(), Why{Reason: reason, By: ByPlugin}, now)
		ev.PodUID = r.PodUID
		if err := tx.Release(r, ev); err != nil {
			return err
		}
		j.freed++
	}
	return nil
}

// IsPluginRelease reports whether ev is a release the plugin decided under
// PluginReleases (the entries the daemon reports).
func IsPluginRelease(ev AuditEvent) bool {
	return ev.Action == AuditRelease && ev.By == "plugin" && slices.Contains(PluginReasons, ev.Reason)
}
