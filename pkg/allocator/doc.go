// Package allocator is hostlease's allocation policy and its domain types:
// which address an ADD gets (host-local's round-robin choice, choose.go and
// allocate.go), what DEL, the GC verb and an operator's release free
// (release.go, one release-with-audit: ReleaseRecord), the commit marker
// (commit.go), pool usage (usage.go) and host-local import/export
// (hostlocal.go). It is written against Store (store.go), the little a
// transaction on a store must offer; package store implements it over bbolt
// and the tests use an in-memory fake.
//
// Record, Owner, StoredRangeSet, Attachment and the audit and damage types
// live here so that the CNI config loader and the store share them without
// depending on each other.
package allocator
