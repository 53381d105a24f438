//go:build nofastencode

package main

// fastEncode: built with -tags nofastencode, every result goes to types.PrintResult.
const fastEncode = false
