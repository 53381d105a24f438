package reclaim

import (
	"fmt"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// NetnsDirView is what a sweep saw of --netns-dir: its path and identity
// (zero, with Err, when it could not be stat'ed). It is taken once a sweep.
type NetnsDirView struct {
	Dir string
	ID  allocator.DirID
	Err error
}

// NetnsFacts is what a sweep saw of one network's netns evidence.
type NetnsFacts struct {
	// Evidence counts the network's records by what their netns can prove
	// from --netns-dir (allocator.NetnsEvidenceOf).
	Evidence map[allocator.NetnsEvidence]int
	// LiveMissing counts READY sandboxes whose netns, witnessed in the very
	// directory --netns-dir is, is missing there: a live sandbox's netns
	// cannot be gone, so the network's missing netns prove nothing.
	LiveMissing int
	// OtherDir is one directory identity a record carries that --netns-dir
	// does not have; Elsewhere one netns path not in --netns-dir (for the
	// log: what the plugin saw).
	OtherDir  allocator.DirID
	Elsewhere string
}

// Unverified is how many records name a netns whose disappearance would
// prove nothing from --netns-dir: every record with a named netns that is
// not NetnsProvable, and all of them on a network where a READY sandbox's
// netns is missing.
func (f NetnsFacts) Unverified() int {
	n := 0
	for e, c := range f.Evidence {
		if IsUnverified(e, f.LiveMissing) {
			n += c
		}
	}
	return n
}

// IsUnverified reports whether a record whose netns has evidence e, on a
// network where liveMissing READY sandboxes' netns are missing, names a
// netns that proves nothing.
func IsUnverified(e allocator.NetnsEvidence, liveMissing int) bool {
	return e != allocator.NetnsUnnamed && (e != allocator.NetnsProvable || liveMissing > 0)
}

// JudgeNetns decides whether a record's missing netns may prove its
// sandbox dead: only when NetnsEvidenceOf says NetnsProvable and no READY
// sandbox of the network lacks its netns (liveMissing). Otherwise it says
// why not, for the decision's detail ("" when the record names no netns:
// there is nothing to doubt). The classes' words are allocator's
// (NetnsEvidence.Doubt).
func JudgeNetns(e allocator.NetnsEvidence, r *allocator.Record, view NetnsDirView, liveMissing int) (provable bool, doubt string) {
	if e == allocator.NetnsProvable {
		if liveMissing == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d READY sandboxes' netns are missing from --netns-dir %s", liveMissing, view.Dir)
	}
	return false, e.Doubt(r, view.JudgeView())
}

// JudgeView is the view as allocator's doubt texts take it.
func (v NetnsDirView) JudgeView() allocator.NetnsJudgeView {
	return allocator.NetnsJudgeView{Dir: v.Dir, ID: v.ID, Err: v.Err}
}

// Netns proof states (NetnsProofStatus.State).
const (
	NetnsProofVerified    = "verified"     // a record's witness matches --netns-dir
	NetnsProofUnreadable  = "unreadable"   // --netns-dir, where records' netns are, cannot be stat'ed
	NetnsProofLiveMissing = "live_missing" // a READY sandbox's netns is missing there
	NetnsProofOtherDir    = "other_dir"    // records saw another directory
	NetnsProofElsewhere   = "elsewhere"    // records' netns lie outside --netns-dir
	NetnsProofNoWitness   = "no_witness"   // no record carries a usable witness yet
	NetnsProofNoNetns     = "no_netns"     // no record names a netns
)

// NetnsProofStatus is a sweep's node-wide verdict on the netns proof.
type NetnsProofStatus struct {
	// Verified: --netns-dir is the directory the plugin records (at least
	// one record's witness has its identity) and no READY sandbox's netns
	// is missing there.
	Verified bool
	// State is one of the NetnsProof* constants.
	State string
	// Why says what was seen, in words, for the log and `leaks`.
	Why string
	// Unverified is how many records (every network) name a netns that
	// proves nothing (NetnsFacts.Unverified).
	Unverified int
	// Key identifies the state for "log on change": the state and the
	// identities involved, not the counts.
	Key string
}

// Warn reports whether the status calls for a person: the proof is off
// while records need it (a wrong or unreadable --netns-dir, or a live
// sandbox's netns missing), not merely waiting for a first witness.
func (st NetnsProofStatus) Warn() bool {
	switch st.State {
	case NetnsProofVerified, NetnsProofNoWitness, NetnsProofNoNetns:
		return false
	}
	return true
}

// NetnsProof judges, once per sweep and for the whole node, whether
// "netns gone" can prove anything: only positive evidence (a record's
// witness with --netns-dir's identity, NetnsEvidenceOf) turns it on; an
// empty, unreadable or unknown directory proves nothing. nets are the
// sweep's readable networks' facts.
func NetnsProof(view NetnsDirView, nets []NetnsFacts) NetnsProofStatus {
	var ev = map[allocator.NetnsEvidence]int{}
	st := NetnsProofStatus{}
	live, other, elsewhere := 0, allocator.DirID{}, ""
	for _, f := range nets {
		for e, n := range f.Evidence {
			ev[e] += n
		}
		live += f.LiveMissing
		st.Unverified += f.Unverified()
		if !other.Known() {
			other = f.OtherDir
		}
		if elsewhere == "" {
			elsewhere = f.Elsewhere
		}
	}
	set := func(state, why, key string) NetnsProofStatus {
		st.State, st.Why, st.Key = state, why, state+" "+key
		return st
	}
	named := 0
	for e, n := range ev {
		if e != allocator.NetnsUnnamed {
			named += n
		}
	}
	// An unreadable directory is worth a warning only when records need it;
	// otherwise it is said as part of why the proof waits.
	dirNote := ""
	if view.Err != nil {
		dirNote = fmt.Sprintf(" (and --netns-dir %s cannot be read: %v)", view.Dir, view.Err)
	}
	switch {
	case live > 0:
		return set(NetnsProofLiveMissing, fmt.Sprintf("%d READY sandboxes' netns are missing from --netns-dir %s: no missing netns proves a death on their networks", live, view.Dir), view.ID.String())
	case ev[allocator.NetnsProvable] > 0:
		st.Verified = true
		return set(NetnsProofVerified, fmt.Sprintf("--netns-dir %s is directory %s, the one the plugin records: a missing netns proves a death", view.Dir, view.ID), view.ID.String())
	case ev[allocator.NetnsDirUnseen] > 0:
		return set(NetnsProofUnreadable, fmt.Sprintf("--netns-dir %s cannot be read (%v), and %d records' netns are there: no missing netns proves a death", view.Dir, view.Err, ev[allocator.NetnsDirUnseen]), view.Err.Error())
	case ev[allocator.NetnsOtherDir] > 0:
		return set(NetnsProofOtherDir, fmt.Sprintf("--netns-dir %s is directory %s, but the plugin saw the netns of %d records in directory %s: not the runtime's directory (a wrong hostPath or mount); no missing netns proves a death",
			view.Dir, view.ID, ev[allocator.NetnsOtherDir], other), view.ID.String()+" "+other.String())
	case ev[allocator.NetnsElsewhere] > 0:
		return set(NetnsProofElsewhere, fmt.Sprintf("the netns of %d records are not in --netns-dir %s (e.g. %s): they are never judged by their netns", ev[allocator.NetnsElsewhere], view.Dir, elsewhere), view.ID.String())
	case ev[allocator.NetnsReusableID] > 0:
		return set(NetnsProofNoWitness, fmt.Sprintf("the %d records whose netns are in --netns-dir %s know its directory by device and inode numbers only, which the kernel reuses (written by an older plugin, or a filesystem without file handles): the proof waits for a record the plugin writes now%s", ev[allocator.NetnsReusableID], view.Dir, dirNote), view.ID.String())
	case named > 0:
		return set(NetnsProofNoWitness, fmt.Sprintf("none of the %d records that name a netns carries a witness of its directory to compare with --netns-dir %s (written by an older plugin, or the netns did not exist at ADD): the proof waits for a record the plugin writes now%s", named, view.Dir, dirNote), view.ID.String())
	}
	return set(NetnsProofNoNetns, fmt.Sprintf("no record names a netns yet: --netns-dir %s is verified by the first one%s", view.Dir, dirNote), view.ID.String())
}
