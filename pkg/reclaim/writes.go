package reclaim

import "github.com/hostlease/hostlease/pkg/allocator"

// MaxInfoWrites is how many records a sweep rewrites at most only to bring
// what a person reads up to date (see Writes).
const MaxInfoWrites = 1000

// Writes chooses which decisions a sweep stores, by index in order: every
// decision that changes what later sweeps decide on (a reclaim, a commit, the
// miss count, the start of an absence), and of those that change only what a
// person reads (Observation.Verdict and SandboxState, shown by `hostlease-gc
// list`) the first maxInfo. The others are decided again by the next sweep
// and stored then. So when every record's observation changes at once (a
// daemon's first sweep over a big store, a CRI outage and its end) a sweep's
// write transaction, the exclusive lock plugins wait behind, stays bounded,
// and the informational fields catch up within a few sweeps; the policy never
// waits for them.
func Writes(ds []Decision, maxInfo int) []int {
	var out []int
	for i, d := range ds {
		if d.Action == Keep && d.Obs == d.Record.Obs {
			continue // nothing changes
		}
		if d.Action == Keep && infoOnly(d.Obs, d.Record.Obs) {
			if maxInfo <= 0 {
				continue
			}
			maxInfo--
		}
		out = append(out, i)
	}
	return out
}

// infoOnly reports whether two observations differ only in the fields no
// decision reads (a field added to Observation counts as read).
func infoOnly(a, b allocator.Observation) bool {
	a.Verdict, a.SandboxState = b.Verdict, b.SandboxState
	return a == b
}
