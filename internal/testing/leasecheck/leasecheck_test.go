package leasecheck

import (
	"net/netip"
	"testing"
	"time"
)

func TestOverlapped(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	never := time.Time{}
	for _, c := range []struct {
		name string
		x, y Holding
		want bool
	}{
		{"one released before the other's ADD began", Holding{"a", at(0), at(10), at(20)}, Holding{"b", at(30), at(40), at(50)}, false},
		{"the second ADD ran while the first DEL ran", Holding{"a", at(0), at(10), at(20)}, Holding{"b", at(15), at(25), never}, false},
		{"both added before either DEL", Holding{"a", at(0), at(10), at(30)}, Holding{"b", at(5), at(20), at(40)}, true},
		{"neither released", Holding{"a", at(0), at(10), never}, Holding{"b", at(5), at(20), never}, true},
		{"one never released, the other released before that ADD returned", Holding{"a", at(0), at(10), never}, Holding{"b", at(0), at(5), at(8)}, false},
		{"one never released, the other released after both ADDs returned", Holding{"a", at(0), at(10), never}, Holding{"b", at(0), at(5), at(12)}, true},
		{"an ADD returned exactly when the DEL started", Holding{"a", at(0), at(10), at(20)}, Holding{"b", at(15), at(20), never}, false},
		{"an ADD returned just before the DEL started", Holding{"a", at(0), at(10), at(20)}, Holding{"b", at(15), at(19), never}, true},
	} {
		for _, swap := range []bool{false, true} {
			x, y := c.x, c.y
			if swap {
				x, y = y, x
			}
			if got, _ := Overlapped(&x, &y); got != c.want {
				t.Errorf("%s (swapped %v): Overlapped = %v, want %v", c.name, swap, got, c.want)
			}
		}
	}
}

func TestBookDuplicates(t *testing.T) {
	b := NewBook()
	ip1, ip2, ip3 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1")
	first := &Holding{Owner: "first", AddStart: time.Now()}
	first.AddDone = time.Now()
	b.Hold(first, ip1, ip3)
	b.Releasing(first)
	if first.DelStart.IsZero() {
		t.Fatal("Releasing did not date the DEL")
	}
	// ip1 again, added after first's DEL started: not a duplicate.
	second := &Holding{Owner: "second", AddStart: first.DelStart, AddDone: first.DelStart.Add(time.Millisecond)}
	b.Hold(second, ip1)
	// ip2 twice, both still held: a duplicate.
	x := &Holding{Owner: "x", AddStart: time.Now(), AddDone: time.Now()}
	y := &Holding{Owner: "y", AddStart: time.Now(), AddDone: time.Now()}
	b.Hold(x, ip2)
	b.Hold(y, ip2)
	// ip3: first (released) and z, added before first's DEL started.
	z := &Holding{Owner: "z", AddStart: first.AddStart, AddDone: first.AddDone}
	b.Hold(z, ip3)

	dups := b.Duplicates()
	if len(dups) != 2 {
		t.Fatalf("duplicates %+v, want ip2 (x, y) and ip3 (first, z)", dups)
	}
	if d := dups[0]; d.IP != ip2 || d.A != x || d.B != y || d.Both != y.AddDone {
		t.Errorf("first duplicate %+v, want %s held by x and y, both by y's ADD", d, ip2)
	}
	if d := dups[1]; d.IP != ip3 || d.A != first || d.B != z {
		t.Errorf("second duplicate %+v, want %s held by first and z", d, ip3)
	}
}

// An address of a holding never released that the final state does not give
// its owner is lost; released holdings and kept ones are not.
func TestBookLost(t *testing.T) {
	b := NewBook()
	ip1, ip2, ip3 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	kept := &Holding{Owner: "kept", AddStart: time.Now(), AddDone: time.Now()}
	forgotten := &Holding{Owner: "forgotten", AddStart: time.Now(), AddDone: time.Now()}
	released := &Holding{Owner: "released", AddStart: time.Now(), AddDone: time.Now()}
	b.Hold(kept, ip1)
	b.Hold(forgotten, ip2)
	b.Hold(released, ip3)
	b.Releasing(released)
	final := map[netip.Addr]string{ip1: "kept", ip2: "someone-else"}
	lost := b.Lost(func(ip netip.Addr, owner string) bool { return final[ip] == owner })
	if len(lost) != 1 || lost[0].IP != ip2 || lost[0].H != forgotten {
		t.Fatalf("Lost = %+v, want only %s of forgotten", lost, ip2)
	}
}
