//go:build nofastdecode

package netconf

// fastDecode is off: see fast_on.go.
const fastDecode = false
