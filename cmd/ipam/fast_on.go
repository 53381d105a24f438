//go:build !nofastencode

package main

// fastEncode: printResult writes the results it can itself (A/B in test/bench).
const fastEncode = true
