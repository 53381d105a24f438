package daemon

import (
	"net"
	"net/http"
	"testing"
)

// Which held connection the listener sheds first when it is full.
func TestShedBefore(t *testing.T) {
	perSrc := map[string]int{"flood": 100, "kubelet": 1, "prom": 1}
	conn := func(src string, st http.ConnState, since uint64) *trackedConn {
		return &trackedConn{src: src, state: st, since: since}
	}
	cases := []struct {
		name string
		a, b *trackedConn
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

// fakeConn is a connection from one client address.
type fakeConn struct {
	net.Conn
	src string
}

func (c *fakeConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.ParseIP(c.src), Port: 1} }

// Which connection the listener closes for a new one: none while there is
// room; one of the new connection's own address at its per-client cap; the
// new one itself rather than a connection serving a probe.
func TestConnCapChoose(t *testing.T) {
	type held struct {
		src   string
		state http.ConnState
		probe bool
	}
	cases := []struct {
		name     string
		max, per int
		held     []held
		newSrc   string
		want     int // index into held, -1: none, -2: the new connection
	}{
		{"room", 3, 3, []held{{"a", http.StateIdle, false}, {"b", http.StateIdle, false}}, "c", -1},
		{"full: the biggest holder's idle", 3, 3, []held{{"a", http.StateActive, false}, {"b", http.StateActive, false}, {"b", http.StateIdle, false}}, "c", 2},
		{"per-client cap with room left: its own", 10, 2, []held{{"b", http.StateIdle, false}, {"b", http.StateIdle, false}, {"b", http.StateIdle, false}, {"a", http.StateNew, false}, {"a", http.StateActive, false}}, "a", 4},
		{"per-client cap: a probe kept, the new one closed", 10, 1, []held{{"n", http.StateActive, true}}, "n", -2},
		{"full, the biggest holder serving probes only: another's idle", 3, 3, []held{{"n", http.StateActive, true}, {"n", http.StateActive, true}, {"b", http.StateIdle, false}}, "c", 2},
		{"full of probes: the new one closed", 2, 2, []held{{"n", http.StateActive, true}, {"m", http.StateActive, true}}, "p", -2},
		{"a probe kept, a flood's new connection closed first", 2, 2, []held{{"n", http.StateActive, true}, {"n", http.StateNew, false}}, "n", 1},
	}
	addrOf := map[string]string{"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "n": "10.0.0.4", "m": "10.0.0.5", "p": "10.0.0.6"}
	for _, tc := range cases {
		c := &connCap{max: tc.max, perClient: tc.per, conns: map[net.Conn]*trackedConn{}}
		var conns []net.Conn
		for _, h := range tc.held {
			conn := &fakeConn{src: addrOf[h.src]}
			conns = append(conns, conn)
			c.seq++
			c.conns[conn] = &trackedConn{src: conn.src, state: h.state, since: c.seq, probe: h.probe}
		}
		nc := &fakeConn{src: addrOf[tc.newSrc]}
		got := c.choose(nc)
		want := net.Conn(nil)
		switch {
		case tc.want == -2:
			want = nc
		case tc.want >= 0:
			want = conns[tc.want]
		}
		if got != want {
			t.Errorf("%s: chose %v, want %v (index %d)", tc.name, got, want, tc.want)
		}
	}
}
