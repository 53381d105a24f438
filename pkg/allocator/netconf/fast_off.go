//go:build nofastdecode

package netconf

// fastDecode: built with -tags nofastdecode, every config goes to json.Unmarshal.
const fastDecode = false
