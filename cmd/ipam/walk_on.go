//go:build !walkinlock

package main

import "github.com/hostlease/hostlease/pkg/allocator"

// newHoldersWalk is the ADD's walk for namespaces still held, made with the
// store unlocked (allocator.HoldersWalk). Built with -tags walkinlock
// (walk_off.go) the walk is made inside the transaction: make bench measures
// that build beside the plugin (test/bench BenchmarkHealStorm), the gain
// reserve states.
func newHoldersWalk() *allocator.HoldersWalk { return &allocator.HoldersWalk{} }
