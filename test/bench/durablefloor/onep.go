//go:build onep

package main

// Built with -tags onep (the benchmark's "-1p" floors), the floor runs on one
// P from early initialisation exactly as hostlease does.
import _ "github.com/hostlease/hostlease/internal/oneproc"
