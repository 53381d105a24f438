//go:build !nofastdecode

package netconf

// fastDecode: decodeFast takes the configs it can (A/B in test/bench).
const fastDecode = true
