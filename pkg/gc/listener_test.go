package gc

import (
	"net/http"
	"testing"
)

// Which held connection the listener sheds first when it is full.
func TestShedBefore(t *testing.T) {
	perSrc := map[string]int{"flood": 100, "kubelet": 1, "prom": 1}
	conn := func(src string, st http.ConnState, since uint64) *heldConn {
		return &heldConn{src: src, state: st, since: since}
	}
	cases := []struct {
		name string
		a, b *heldConn
		want bool // a is shed before b
	}{
		{"the flood's newest before the kubelet's oldest", conn("flood", http.StateNew, 99), conn("kubelet", http.StateNew, 1), true},
		{"the kubelet's never before the flood's", conn("kubelet", http.StateNew, 1), conn("flood", http.StateActive, 99), false},
		{"the flood's active before a single idle one", conn("flood", http.StateActive, 5), conn("prom", http.StateIdle, 1), true},
		{"same address: idle before active", conn("flood", http.StateIdle, 9), conn("flood", http.StateActive, 1), true},
		// A probe's connection is new (its header on the way): its address
		// gives it up last, so a flood from the kubelet's own address sheds
		// its own responses in progress first.
		{"same address: active before new", conn("node", http.StateActive, 9), conn("node", http.StateNew, 1), true},
		{"same address: new after active", conn("node", http.StateNew, 1), conn("node", http.StateActive, 9), false},
		{"same address: idle before new", conn("node", http.StateIdle, 9), conn("node", http.StateNew, 3), true},
		{"same address, both new: older first", conn("flood", http.StateNew, 3), conn("flood", http.StateNew, 4), true},
		{"same address, both idle: newer later", conn("flood", http.StateIdle, 4), conn("flood", http.StateIdle, 3), false},
		{"same address, both active: longer served first", conn("flood", http.StateActive, 2), conn("flood", http.StateActive, 7), true},
		{"equal holders: idle before active", conn("prom", http.StateIdle, 8), conn("kubelet", http.StateActive, 1), true},
	}
	for _, tc := range cases {
		if got := shedBefore(tc.a, tc.b, perSrc); got != tc.want {
			t.Errorf("%s: shedBefore = %v, want %v", tc.name, got, tc.want)
		}
	}
}
