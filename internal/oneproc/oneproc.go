// Package oneproc, imported for its side effect, runs the importing command
// with GOMAXPROCS=1 from early in package initialisation.
//
// It is for the CNI plugin: a process that lives a few milliseconds, runs one
// goroutine's worth of work and spends much of its life blocked in flock(2)
// and fdatasync(2). With the default of one P per CPU, a P blocked in a system
// call is not handed off while another P is idle (for up to 10 ms), and all
// that time sysmon wakes to look at it (every 20 us for the first
// millisecond, then at doubling intervals); with one P the blocked P is
// handed off at sysmon's first look and sysmon then sleeps until the call
// returns. In a burst of pod starts, each plugin waiting for the store lock,
// one P saves each call those wake-ups and their CPU time (figures:
// docs/benchmarks.md, "One P").
//
// The setting is made in an init function rather than in main so that the
// packages initialised after it (the CNI libraries', encoding/json's, ...)
// already run on one P: resizing drops the other P's cached memory spans,
// and the fewer there are, the cheaper the resize. Package initialisation runs a package once all its imports
// are initialised, earliest import path first; this package imports only
// runtime, so it runs right after the runtime's own and a few others.
//
// It must not be imported by long-running programs (the hostlease-gc daemon):
// they do work in parallel and are better served by the default.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
