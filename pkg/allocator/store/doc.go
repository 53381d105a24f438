// Package store is hostlease's durable allocation store: one bbolt file per
// network, opened for one transaction at a time under the file lock
// (lockwait.go), with the records as the truth and derived indexes (the
// taken bitmap, the owner index, the pod index, the imported index, the
// records count) kept in step by every write and verified when used
// (integrity.go). It is the only code that knows bucket names and bytes
// (layout.go, codec.go).
//
// Files are named by job; Tx methods are gathered by the bucket they touch:
// records.go (allocs), owners.go (ownerhash), pods.go (poduid), taken.go
// (takenbits), meta.go, exhaustion.go, audit.go; query.go is the one lookup
// through them (Records), queue.go the inline queues. cache.go and rewrite.go are
// a repeated reader's byte-level record cache and its compare-and-put
// rewrite (the daemon's sweep). Errors come in four classes (errors.go):
// damage found at open, damage met later, the environment, another schema.
//
// Tx implements allocator.Store: the allocation policy (package allocator)
// runs on it without knowing any of this.
package store
