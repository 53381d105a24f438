package gcintegration

import (
	"fmt"
	"testing"
)

// An address a READY sandbox uses but no record holds (a restored backup, a
// rolled-back store, a bug) is re-reserved for that sandbox and reported; the
// plugin never hands it out again.
func TestUnrecordedLiveAddressReReserved(t *testing.T) {
	t.Parallel()
	n := newNode(t, 3) // 10.77.0.10 - .12
	first := n.add("live-0")
	n.cri.Ready("live-0", first)
	ghostIP := first.Next() // the address the next ADD would get
	n.cri.Ready("ghost", ghostIP)

	d := n.startDaemon("--interval", "1h")
	eventually(t, "the ghost's address re-reserved", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_addresses_rereserved_total", lbl("network", network, "reason", "unrecorded"))
		return v == 1, fmt.Sprintf("rereserved{unrecorded} %v", v)
	})
	recs := n.records()
	g, ok := recs["ghost"]
	if !ok || g.IP != ghostIP || g.State != "committed" || g.Source != "reconcile" || g.PodName != "pod-ghost" {
		t.Fatalf("ghost's record: %+v (present %v)", g, ok)
	}
	logs := d.logs.entries("re-reserved address for the READY sandbox that uses it: the store did not hold it for that sandbox")
	if len(logs) != 1 || logs[0]["ip"] != ghostIP.String() || logs[0]["level"] != "WARN" {
		t.Fatalf("log: %v", logs)
	}
	// The pool: .10 live-0, .11 the ghost's; ADD gets .12, then nothing.
	got := n.add("new-0")
	if got == ghostIP || got == first {
		t.Fatalf("ADD got %s, an address in use", got)
	}
	if o := n.tryAdd("new-1"); o.OK() {
		ip, _ := resultIP(o.Stdout)
		t.Fatalf("ADD on a pool whose every address is in use succeeded with %s", ip)
	}
	if p := n.pool(); p.Used != 3 || p.Free != "0" {
		t.Fatalf("status %+v, want 3 used 0 free", p)
	}
}

// An address a READY sandbox uses that the store holds for a sandbox the
// runtime no longer lists is taken over for the user; the old owner's late
// DEL releases nothing of it.
func TestAddressOfDeadOwnerReReserved(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	ip := n.add("dead")
	n.cri.Ready("thief", ip) // uses the dead sandbox's address
	d := n.startDaemon("--interval", "1h", "--misses", "1000", "--grace", "24h", "--min-age", "24h")
	eventually(t, "the address re-reserved for its user", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_addresses_rereserved_total", lbl("network", network, "reason", "other_owner"))
		return v == 1, fmt.Sprintf("rereserved{other_owner} %v", v)
	})
	if o := n.del("dead"); !o.OK() {
		t.Fatalf("late DEL of the old owner: %s", o)
	}
	recs := n.records()
	if r, ok := recs["thief"]; !ok || r.IP != ip {
		t.Fatalf("records %v, want %s held by thief", recs, ip)
	}
	if _, ok := recs["dead"]; ok {
		t.Fatal("the dead owner still holds a record")
	}
}
