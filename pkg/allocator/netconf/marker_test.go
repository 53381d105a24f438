package netconf

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestMarkerShapes: the commit marker is recognised by what it is, a plugin
// entry run as hostlease whose ipam names no IPAM plugin, in every shape a
// runtime hands it (the conflist's own entry, and libcni's rebuild of it,
// which adds "ipam":{} and drops dataDir); anything whose ipam names a type
// stays an IPAM config.
func TestMarkerShapes(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		marker     bool
		storeDir   string // when a marker
		code       uint   // when refused
	}{
		{"no ipam key", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","dataDir":"/run/hl"}`, true, "/run/hl", 0},
		{"empty ipam (libcni's rebuild)", `{"cniVersion":"1.1.0","ipam":{},"name":"n","type":"hostlease"}`, true, allocator.DefaultStoreDir, 0},
		{"empty ipam with dataDir", `{"cniVersion":"1.1.0","ipam":{},"name":"n","type":"hostlease","dataDir":"/run/hl"}`, true, "/run/hl", 0},
		{"ipam with an empty type", `{"cniVersion":"1.1.0","ipam":{"type":""},"name":"n","type":"hostlease"}`, true, allocator.DefaultStoreDir, 0},
		{"ipam key in another case, empty", `{"cniVersion":"1.1.0","IPAM":{},"name":"n","type":"hostlease"}`, true, allocator.DefaultStoreDir, 0},
		{"with the chain's prevResult", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","ipam":{},"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}]}}`, true, allocator.DefaultStoreDir, 0},
		{"ipam naming hostlease under a marker type is an IPAM config", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`, false, "", 0},
		{"ipam naming host-local under a marker type is an IPAM config", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","ipam":{"type":"host-local","subnet":"10.0.0.0/24"}}`, false, "", 0},
		{"ipam with a type and no range under a marker type", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","ipam":{"type":"hostlease"}}`, false, "", uint(types.ErrInvalidNetworkConfig)},
		{"null ipam is a missing section", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","ipam":null}`, false, "", uint(types.ErrInvalidNetworkConfig)},
		{"empty ipam under another type", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{}}`, false, "", uint(types.ErrInvalidNetworkConfig)},
		{"no ipam under another type", `{"cniVersion":"1.1.0","name":"n","type":"bridge"}`, false, "", uint(types.ErrInvalidNetworkConfig)},
		{"ipam not an object", `{"cniVersion":"1.1.0","name":"n","type":"hostlease","ipam":"x"}`, false, "", uint(types.ErrDecodingFailure)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.conf), "")
			if tc.code != 0 {
				e, ok := err.(*types.Error)
				if !ok || e.Code != tc.code {
					t.Fatalf("Load = %v, %v; want error code %d", c, err, tc.code)
				}
				if NamesNoRange([]byte(tc.conf)) && tc.marker {
					t.Errorf("NamesNoRange true for a marker")
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.Marker != tc.marker {
				t.Fatalf("Marker = %v, want %v", c.Marker, tc.marker)
			}
			if tc.marker {
				if c.StoreDir != tc.storeDir || c.IPAM != nil || c.RangeSets != nil {
					t.Errorf("marker: StoreDir %q IPAM %v RangeSets %v; want StoreDir %q and no ipam", c.StoreDir, c.IPAM, c.RangeSets, tc.storeDir)
				}
				if NamesNoRange([]byte(tc.conf)) {
					t.Errorf("NamesNoRange true for the marker")
				}
			}
		})
	}
}

// TestNamesNoRange: true exactly for the IPAM configs Load refuses with "no
// IP ranges specified"; a config naming any range (valid or not), a marker,
// or one that does not decode is false.
func TestNamesNoRange(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       bool
	}{
		{"bridge's ipam rebuilt by libcni", `{"cniVersion":"1.1.0","ipam":{"type":"hostlease"},"name":"n","type":"bridge"}`, true},
		{"dataDir and failStatusOnExhaustion, no range", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","dataDir":"/run/hl","failStatusOnExhaustion":true}}`, true},
		{"empty ranges", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[]}}`, true},
		{"no range and a bad lockTimeout", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","lockTimeout":"x"}}`, true},
		{"ranges", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24"}]]}}`, false},
		{"legacy subnet", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","subnet":"10.0.0.0/24"}}`, false},
		{"runtimeConfig ipRanges", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease"},"runtimeConfig":{"ipRanges":[[{"subnet":"10.0.0.0/24"}]]}}`, false},
		{"an empty range set is a range set", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[[]]}}`, false},
		{"an invalid range", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.1/31"}]]}}`, false},
		{"no ipam", `{"cniVersion":"1.1.0","name":"n","type":"bridge"}`, false},
		{"null ipam", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":null}`, false},
		{"marker", `{"cniVersion":"1.1.0","ipam":{},"name":"n","type":"hostlease"}`, false},
		{"not JSON", `{"cniVersion":`, false},
		{"ipam of the wrong type", `{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":"x"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NamesNoRange([]byte(tc.conf)); got != tc.want {
				t.Fatalf("NamesNoRange = %v, want %v", got, tc.want)
			}
			// What it answers for, Load refuses with the field and code 7.
			if tc.want {
				_, err := Load([]byte(tc.conf), "")
				e, ok := err.(*types.Error)
				if !ok || e.Code != types.ErrInvalidNetworkConfig {
					t.Fatalf("Load = %v; want code 7", err)
				}
			}
		})
	}
}
