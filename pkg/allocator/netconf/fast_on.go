//go:build !nofastdecode

package netconf

// fastDecode turns decodeFast on. Built with -tags nofastdecode (fast_off.go)
// every config goes to json.Unmarshal: make bench measures that build beside
// the plugin (test/bench -bench.variants), the gain decodeFast states.
const fastDecode = true
