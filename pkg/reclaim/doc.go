// Package reclaim is the node daemon's judgement: pure functions from what a
// sweep observed to what may be done with each address. It does no I/O: it
// reads no file, store, netns, clock or network, and writes nothing; the
// time is an argument. It imports pkg/allocator (the domain types and their
// pure helpers) and the standard library only, which deps_test.go checks
// against the dependency list (no bbolt, store, gRPC, CRI, client-go,
// Prometheus, net/http or os/exec).
//
// It decides:
//   - each record's verdict (Decide, or Judge then Settle): keep, mark
//     committed, or release, with its Reason (the stored verdict, the audit
//     reason and the metrics' reason label); proof of death, misses, grace,
//     minimum age, the API server's veto and the mass-reclaim guard
//     (GuardLimit);
//   - the other direction, CRI → store (Reconcile): the addresses READY
//     sandboxes use that the store does not hold for them, re-reserved or
//     reported as conflicts;
//   - whether a record's missing netns may prove its sandbox dead
//     (JudgeNetns) and the node-wide state of that proof (NetnsProof), on
//     the evidence allocator.NetnsEvidenceOf classes;
//   - what a sweep writes to a store (Writes, PlanStore: none in a dry run)
//     and whether it rebuilds an unreadable one (ShouldRebuild);
//   - what a rebuilt store holds (MergeRebuild).
//
// Its inputs are plain values the daemon gathers: the records and damaged
// records of a store snapshot, its range sets, each record's netns facts
// (Candidate), the runtime's answer (CRIView, Use, SandboxAddrs), the API
// server's pods (APIView), the node's boot time, the thresholds (Policy),
// --dry-run and the sweep's clock reading. pkg/daemon observes, acts on the
// returned verdicts and plans, and reports them.
package reclaim
