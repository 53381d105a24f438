//go:build walkinlock

package main

import "github.com/hostlease/hostlease/pkg/allocator"

// newHoldersWalk is nil: the walk is made inside the transaction (see
// walk_on.go).
func newHoldersWalk() *allocator.HoldersWalk { return nil }
