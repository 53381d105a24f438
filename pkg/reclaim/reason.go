package reclaim

import "github.com/hostlease/hostlease/pkg/allocator"

// Reason is why the policy keeps or reclaims a record: the Decision's reason,
// the verdict stored in the record's observation (shown by `hostlease-gc
// list` and `leaks`), and for a reclaim the audit reason and the reason label
// of hostlease_reclaims_total.
type Reason string

// Reasons to keep a record.
const (
	// KeepLive: the sandbox is listed READY.
	KeepLive Reason = "live"
	// KeepStale: the sandbox is listed NOTREADY or UNKNOWN: the runtime's to
	// release.
	KeepStale Reason = "stale"
	// KeepAbsent: the sandbox is absent, for too few sweeps or too short a
	// time yet.
	KeepAbsent Reason = "absent"
	// KeepInFlight: the record is too young (or newer than the CRI answer): an
	// ADD may still be in flight.
	KeepInFlight Reason = "in_flight"
	// KeepVetoed: a live pod on this node lists the address.
	KeepVetoed Reason = "vetoed"
	// KeepGuarded: the mass-reclaim guard refused this sweep's reclaims
	// without proof of death.
	KeepGuarded Reason = "guarded"
	// KeepCRIUnavailable: CRI did not answer completely.
	KeepCRIUnavailable Reason = "cri_unavailable"
	// KeepAPIUnavailable: the API server, in use, could not be read.
	KeepAPIUnavailable Reason = "api_unavailable"
)

// Reasons to reclaim a record: label values of hostlease_reclaims_total
// (docs/contracts.md).
const (
	// ReleaseSandboxAbsent: absent for --misses sweeps and --grace, older
	// than --min-age, no veto, within the guard.
	ReleaseSandboxAbsent Reason = "sandbox_absent"
	// ReleaseNetnsGone: absent and its netns is gone (proof of death).
	ReleaseNetnsGone Reason = "netns_gone"
	// ReleasePredatesBoot: absent and written before the node's last boot
	// (proof of death).
	ReleasePredatesBoot Reason = "predates_boot"
	// ReleaseHostLocalGone: imported from host-local, whose reservation file
	// was removed since.
	ReleaseHostLocalGone Reason = "host_local_gone"
	// ReleaseManual: released by `hostlease-gc release`.
	ReleaseManual Reason = "manual"
)

// ReleaseReasons are every reclaim reason, in the order metrics list them.
var ReleaseReasons = []Reason{ReleaseSandboxAbsent, ReleaseNetnsGone, ReleasePredatesBoot, ReleaseHostLocalGone, ReleaseManual}

// IsLeakCandidate is the one meaning of "leak candidate", shared by the
// hostlease_leak_candidates gauge, `hostlease-gc status` and `leaks`: a
// record whose sandbox was absent from the last complete CRI answer the
// daemon judged it on (its observation counts a miss) and that is still
// held. A listed sandbox resets the count; a CRI outage keeps it (an outage
// is not a sighting). The gauge counts the observations a sweep decided,
// `status` those the daemon stored (the same, except under --dry-run, which
// stores nothing).
func IsLeakCandidate(o allocator.Observation) bool { return o.Misses > 0 }
