// Package daemon is hostlease-gc's node daemon and the I/O of its commands:
// it observes (the stores' snapshots, the runtime over CRI, the node's netns
// and host-local files, the API server), writes what pkg/reclaim decided
// (reclaims, commits, re-reservations, index repairs, rebuilds) and reports
// it (logs, Kubernetes Events, Prometheus metrics on a bounded HTTP
// listener). The judgement itself, what may be reclaimed and what a sweep
// or a rebuild writes, is pkg/reclaim's, a pure package this one hands
// plain values to.
//
// A sweep (Sweeper.Sweep) is a pipeline of values, in this order:
// observe → decide (decide.go hands the observations to pkg/reclaim and
// encodes the records its plan rewrites) → act → report; the order and
// what each stage may assume are in docs/architecture.md ("The path of a
// sweep"). A rebuild (RebuildStore) gathers from CRI, merges with
// reclaim.MergeRebuild and replaces the store under its lock. Daemon runs
// sweeps on a timer and when a netns disappears (WatchNetnsDir), and
// serves /metrics, /healthz and /readyz.
package daemon
