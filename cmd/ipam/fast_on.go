//go:build !nofastencode

package main

// fastEncode turns encodeResult on. Built with -tags nofastencode
// (fast_off.go) every result goes to types.PrintResult: make bench measures
// that build beside the plugin (test/bench -bench.variants), the gain
// printResult states.
const fastEncode = true
