package reclaim

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Sandbox states as CRI reports them, plus Absent for "not listed".
const (
	SandboxReady    = "READY"
	SandboxNotReady = "NOTREADY"
	SandboxUnknown  = "UNKNOWN"
	SandboxAbsent   = "absent"
)

// PodSandbox is one pod sandbox as the runtime's CRI lists it
// (ListPodSandbox), with what else the daemon asked of it.
type PodSandbox struct {
	ID    string
	State string // SandboxReady, SandboxNotReady or SandboxUnknown
	// PodNamespace, PodName and PodUID are the sandbox's pod metadata ("" when
	// the runtime gave none): what a rebuild records and a report names.
	PodNamespace, PodName, PodUID string
	// IPs from PodSandboxStatus; filled only for READY sandboxes whose records
	// are still pending (that is when the daemon needs them).
	IPs []netip.Addr
}

// CRIView is one ListPodSandbox answer. Complete is false when the call failed,
// timed out or gave an implausible answer: then nothing may be reclaimed.
type CRIView struct {
	Complete  bool
	Why       string    // why it is not complete
	ListedAt  time.Time // when the list was requested
	Sandboxes map[string]PodSandbox
}

// Pod is what the Kubernetes API says about one pod on this node.
type Pod struct {
	UID, Namespace, Name string
	IPs                  []netip.Addr
	Terminated           bool // phase Succeeded or Failed
}

// APIView is the pods the API server places on this node. Enabled is false when
// the daemon runs without an API server; Available is false when it is enabled
// but could not be read this sweep (then nothing may be reclaimed).
type APIView struct {
	Enabled   bool
	Available bool
	PodsByUID map[string]Pod
}

// Policy holds the thresholds of the reclaim decision.
type Policy struct {
	Misses             int
	Grace              time.Duration
	MinAge             time.Duration
	NetnsGrace         time.Duration
	MaxReclaimFraction float64
}

// Candidate is one record with the facts the policy needs from the node.
type Candidate struct {
	Record *allocator.Record
	// NetnsGone is true when the record's netns is missing from --netns-dir
	// and the record's witness proves --netns-dir is the directory the
	// plugin saw it in (allocator.NetnsEvidenceOf): the runtime tore the
	// sandbox down, so no ADD can be in flight and no container uses the
	// address.
	NetnsGone bool
	// PredatesBoot is true when the record was written before the node last
	// booted (and its netns is not known to exist): every sandbox of the
	// previous boot is dead.
	PredatesBoot bool
	// NetnsDoubt says why the record's netns, which it names, could not be
	// judged (no positive evidence that --netns-dir is the directory the
	// plugin saw); "" when it could or there is none.
	NetnsDoubt string
	// Evidence is what the record's netns can prove (allocator.NetnsEvidenceOf).
	Evidence allocator.NetnsEvidence
}

// proof is the reclaim reason a candidate's proof of death gives, or "".
func (c Candidate) proof() Reason {
	switch {
	case c.NetnsGone:
		return ReleaseNetnsGone
	case c.PredatesBoot:
		return ReleasePredatesBoot
	}
	return ""
}

// PredatesBoot reports whether a record created at created was written before
// the node booted at boot. An unknown boot time (zero) or one after now (a
// reading that cannot be right) proves nothing.
func PredatesBoot(created, boot, now time.Time) bool {
	return !boot.IsZero() && !boot.After(now) && created.Before(boot)
}

// Action is what to do with one record.
type Action int

const (
	// Keep: leave the record; its observation may still change.
	Keep Action = iota
	// MarkCommitted: CRI shows the sandbox READY with this address.
	MarkCommitted
	// Release: release the address (a reclaim).
	Release
)

// Decision is the policy's verdict on one record, with the reason a person reads.
type Decision struct {
	Record *allocator.Record
	Action Action
	// Reason says why: a Keep reason (KeepLive...) for Keep and MarkCommitted,
	// a reclaim reason (ReleaseSandboxAbsent...) for Release.
	Reason Reason
	// Detail explains the reason in words.
	Detail string
	// Obs is the observation to store (it changes even when Action is Keep).
	Obs allocator.Observation
	// Candidate is true for a leak candidate (IsLeakCandidate of Obs).
	Candidate bool
}

// Verdict is the outcome for one network's records.
type Verdict struct {
	Decisions []Decision
	// Guarded is true when the mass-reclaim guard refused this sweep's
	// reclaims without proof of death.
	Guarded bool
	// WouldReclaim is how many reclaims without proof were due: those the
	// guard refused, or those that were made.
	WouldReclaim int
	// Proven is how many reclaims carry proof of death (never limited).
	Proven int
	// GuardLimit is the most reclaims without proof this sweep allowed.
	GuardLimit int
}

// GuardLimit is the most reclaims without proof of death one sweep may make on
// a network with reserved records: the fraction of them, rounded down, but at
// least one, so that a lone leak on a small network is still reclaimed (a
// second one waits for the next sweep).
func GuardLimit(fraction float64, reserved int) int {
	if math.IsNaN(fraction) || fraction <= 0 {
		return 0
	}
	// The epsilon keeps a product such as 0.57*100 = 56.999... from refusing
	// a sweep exactly at the limit.
	return max(1, int(math.Floor(min(fraction, 1)*float64(reserved)+1e-9)))
}

// Decide is the whole reclaim policy: a pure function of the records, what CRI
// and the API server say, and the clock. reserved is how many addresses the
// network's store reserves (its records, damaged ones included). A record is
// reclaimed only when CRI answered completely this sweep, the record predates
// that answer, its sandbox is not listed, and either
//
//   - it carries proof of death (Candidate.NetnsGone or PredatesBoot) and has
//     been absent for p.NetnsGrace (0: at once): no misses, no grace, no
//     minimum age, no API veto and no guard apply, as nothing can still use
//     the address; or
//   - without proof, all hold: absent for at least p.Misses consecutive sweeps
//     and for p.Grace; the record is p.MinAge old (an ADD can be invisible to
//     CRI for minutes while in flight); the API server (when used) was read
//     and no live pod lists the address; and the network's reclaims without
//     proof stay within GuardLimit(p.MaxReclaimFraction, reserved), else none of
//     them is made (a runtime that lists none of our sandboxes must not empty
//     the pool).
//
// A listed sandbox (READY, NOTREADY or UNKNOWN) is never reclaimed: a NOTREADY
// one is the runtime's to tear down.
//
// Decide is Judge followed by Settle; a sweep calls them apart so that it
// reads the API server only when Judge leaves a reclaim it could veto.
func Decide(p Policy, cands []Candidate, reserved int, cri CRIView, api APIView, now time.Time) Verdict {
	v := Judge(p, cands, cri, now)
	Settle(&v, p, reserved, api)
	return v
}

// Judge decides each record on every rule but the API veto and the guard: a
// record due for a reclaim without proof of death is left as a Release with
// reason ReleaseSandboxAbsent for Settle to confirm or refuse.
func Judge(p Policy, cands []Candidate, cri CRIView, now time.Time) Verdict {
	v := Verdict{Decisions: make([]Decision, len(cands))}
	for i, c := range cands {
		v.Decisions[i] = decideOne(p, c, cri, now)
	}
	return v
}

// NeedsAPI reports whether the verdict holds a reclaim without proof of death,
// the only decision the API server can veto.
func (v *Verdict) NeedsAPI() bool {
	for i := range v.Decisions {
		if d := &v.Decisions[i]; d.Action == Release && d.Reason == ReleaseSandboxAbsent {
			return true
		}
	}
	return false
}

// Settle finishes a verdict from Judge: each reclaim without proof of death
// is vetoed when the API server (if used) could not be read or a live pod on
// this node lists its address, and the rest are refused together when they
// exceed the network's GuardLimit.
func Settle(v *Verdict, p Policy, reserved int, api APIView) {
	var unproven []int
	v.Proven = 0
	for i := range v.Decisions {
		d := &v.Decisions[i]
		if d.Action != Release {
			continue
		}
		if d.Reason != ReleaseSandboxAbsent {
			v.Proven++
			continue
		}
		if api.Enabled {
			if !api.Available {
				d.keep(KeepAPIUnavailable, "the API server could not be read to rule out a live pod")
				continue
			}
			if pod, ok := podListing(api, d.Record); ok {
				d.keep(KeepVetoed, fmt.Sprintf("pod %s/%s (uid %s) on this node lists %s", pod.Namespace, pod.Name, pod.UID, d.Record.IP))
				continue
			}
		}
		unproven = append(unproven, i)
	}
	v.WouldReclaim = len(unproven)
	v.GuardLimit = GuardLimit(p.MaxReclaimFraction, reserved)
	v.Guarded = len(unproven) > v.GuardLimit
	if v.Guarded {
		for _, i := range unproven {
			v.Decisions[i].keep(KeepGuarded, fmt.Sprintf("mass-reclaim guard: this sweep would reclaim %d of the %d records without proof of death (limit %d, %g of the records); waiting for a person",
				len(unproven), reserved, v.GuardLimit, p.MaxReclaimFraction))
		}
	}
}

// Apply sets on r what the decision stores: its observation and, for
// MarkCommitted, the committed state at now.
func (d *Decision) Apply(r *allocator.Record, now time.Time) {
	if d.Action == MarkCommitted {
		r.State, r.Committed = allocator.StateCommitted, now
	}
	r.Obs = d.Obs
}

// keep turns d into a Keep for reason, recorded as the stored verdict too.
func (d *Decision) keep(reason Reason, detail string) {
	d.Action, d.Reason, d.Detail, d.Obs.Verdict = Keep, reason, detail, string(reason)
}

func decideOne(p Policy, c Candidate, cri CRIView, now time.Time) Decision {
	r := c.Record
	d := Decision{Record: r, Action: Keep, Obs: r.Obs}
	keep := func(reason Reason, detail string) Decision {
		d.keep(reason, detail)
		d.Candidate = IsLeakCandidate(d.Obs)
		return d
	}
	if !cri.Complete {
		// Say nothing about presence: a failed list is not an absence.
		return keep(KeepCRIUnavailable, "CRI did not answer completely: "+cri.Why)
	}
	if sb, listed := cri.Sandboxes[r.ContainerID]; listed {
		d.Obs.Misses, d.Obs.FirstMissed, d.Obs.SandboxState = 0, time.Time{}, sb.State
		if sb.State != SandboxReady {
			return keep(KeepStale, "sandbox is "+sb.State+": the runtime releases it when it removes the sandbox")
		}
		if r.State == allocator.StatePending && contains(sb.IPs, r.IP) {
			d = keep(KeepLive, "sandbox READY with this address")
			d.Action = MarkCommitted
			return d
		}
		return keep(KeepLive, "sandbox READY")
	}
	if !cri.ListedAt.IsZero() && r.Created.After(cri.ListedAt) {
		// Created after CRI was asked: it cannot be in that answer.
		return keep(KeepInFlight, "allocated after the CRI list was taken")
	}
	d.Obs.SandboxState = SandboxAbsent
	if d.Obs.Misses == 0 || d.Obs.FirstMissed.IsZero() || d.Obs.FirstMissed.After(now) {
		// A first miss in the future means the clock was stepped back since:
		// restart the absence now rather than wait for the clock to catch up.
		d.Obs.FirstMissed = now
	}
	d.Obs.Misses = min(d.Obs.Misses+1, max(p.Misses, 1))
	absentFor := now.Sub(d.Obs.FirstMissed)
	age := now.Sub(r.Created)
	if proof := c.proof(); proof != "" {
		why := "its netns " + r.Netns + " is gone"
		if proof == ReleasePredatesBoot {
			why = "it was written before the node's last boot"
		}
		if absentFor < p.NetnsGrace {
			return keep(KeepAbsent, fmt.Sprintf("sandbox absent and %s; absent for %s of the %s --netns-grace", why, absentFor.Round(time.Second), p.NetnsGrace))
		}
		return release(d, proof, fmt.Sprintf("sandbox absent from CRI and %s (proof of death); allocation %s old", why, age.Round(time.Second)))
	}
	// Without proof: the detail says why its netns proves nothing, if it
	// names one.
	noProof := func(detail string) string {
		if c.NetnsDoubt == "" {
			return detail
		}
		return detail + "; netns proof unavailable: " + c.NetnsDoubt
	}
	if d.Obs.Misses < p.Misses {
		return keep(KeepAbsent, noProof(fmt.Sprintf("sandbox absent from CRI for %d of %d sweeps", d.Obs.Misses, p.Misses)))
	}
	switch {
	case absentFor < p.Grace:
		return keep(KeepAbsent, noProof(fmt.Sprintf("sandbox absent for %s of the %s grace", absentFor.Round(time.Second), p.Grace)))
	case age < p.MinAge:
		return keep(KeepInFlight, noProof(fmt.Sprintf("allocation is %s old, younger than --min-age %s: an ADD may still be in flight", age.Round(time.Second), p.MinAge)))
	}
	return release(d, ReleaseSandboxAbsent, noProof(fmt.Sprintf("sandbox absent from CRI for %d sweeps over %s; allocation %s old", d.Obs.Misses, absentFor.Round(time.Second), age.Round(time.Second))))
}

func release(d Decision, reason Reason, detail string) Decision {
	d.Action, d.Reason, d.Detail, d.Obs.Verdict = Release, reason, detail, string(reason)
	d.Candidate = IsLeakCandidate(d.Obs)
	return d
}

// podListing finds a live pod on this node that lists the record's address:
// the record's own pod (by UID, never by name: a StatefulSet reuses names) or,
// should the address show up on any other live pod, that one. Either way
// reclaiming would hand out an address a pod still shows.
func podListing(api APIView, r *allocator.Record) (Pod, bool) {
	if pod, ok := api.PodsByUID[r.PodUID]; ok && r.PodUID != "" && !pod.Terminated && contains(pod.IPs, r.IP) {
		return pod, true
	}
	for _, pod := range api.PodsByUID {
		if !pod.Terminated && contains(pod.IPs, r.IP) {
			return pod, true
		}
	}
	return Pod{}, false
}

func contains(ips []netip.Addr, ip netip.Addr) bool {
	for _, x := range ips {
		if x == ip {
			return true
		}
	}
	return false
}

// DefaultMaxFraction is the share of a network's records that one
// sweep may reclaim without proof of death. A runtime that lists none of
// the network's sandboxes (a wrong socket) makes every record a candidate
// at once, 100% of them, so any default below 1 refuses it; a node
// rebooted with a persistent data dir is not limited, as its records carry
// proof (they predate the boot).
const DefaultMaxFraction = 0.5
