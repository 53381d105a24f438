//go:build nofastencode

package main

// fastEncode is off: see fast_on.go.
const fastEncode = false
