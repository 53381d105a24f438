// Package daemon is hostlease-gc's node daemon and the I/O of its commands:
// it observes (the stores' snapshots, the runtime over CRI, the node's netns
// and host-local files, the API server), writes what pkg/reclaim decided
// (reclaims, commits, re-reservations, rebuilds) and reports it (logs,
// Kubernetes Events, Prometheus metrics on a bounded HTTP listener).
//
// A sweep (Sweeper.Sweep) is a pipeline of values, in this order:
// observe → decide (pkg/reclaim's pure functions) → act → report; the
// order and what each stage may assume are in docs/architecture.md ("The
// path of a sweep"). Daemon runs sweeps on a timer and when a netns
// disappears (WatchNetnsDir), and serves /metrics, /healthz and /readyz.
package daemon
