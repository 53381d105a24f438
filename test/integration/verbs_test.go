package integration

// One test per CNI verb of the real plugin binary, each holding the verb's
// contract as a runtime relies on it (what it returns, what it changes in the
// store, what it prints on stderr), on a store of its own.

import (
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// withKeys returns the JSON object conf with kv set at its top level.
func withKeys(t *testing.T, conf []byte, kv map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range kv {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// markerConf is the commit marker entry of h's network as libcni hands it to
// the plugin: the conflist's name and cniVersion, the entry's own keys, and
// prevResult when prev is not nil.
func (h *hardNet) markerConf(t *testing.T, prev json.RawMessage) []byte {
	t.Helper()
	m := map[string]any{"cniVersion": "1.1.0", "name": h.network, "type": "hostlease", "dataDir": h.dir}
	if prev != nil {
		m["prevResult"] = prev
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// held returns each container's addresses in h's store.
func (h *hardNet) held(t *testing.T) map[string][]netip.Addr {
	t.Helper()
	out := map[string][]netip.Addr{}
	for _, r := range readStore(t, h.path).Records {
		out[r.ContainerID] = append(out[r.ContainerID], r.IP)
	}
	return out
}

// prevResultOf is a result listing addrs (in 10.81.0.0/24's shape unless
// they carry their own prefix) as a chain's earlier plugin passes it on.
func prevResultOf(addrs ...string) json.RawMessage {
	type ipc struct {
		Address string `json:"address"`
	}
	res := struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []ipc  `json:"ips"`
	}{CNIVersion: "1.1.0", IPs: []ipc{}}
	for _, a := range addrs {
		if !strings.Contains(a, "/") {
			a += "/24"
		}
		res.IPs = append(res.IPs, ipc{a})
	}
	b, _ := json.Marshal(res)
	return b
}

// quiet fails the test when a call that went as expected printed on stderr:
// libcni copies a plugin's stderr to the runtime's own (podman's terminal).
func quiet(t *testing.T, what string, o outcome) {
	t.Helper()
	if len(o.Stderr) != 0 {
		t.Errorf("%s printed on stderr (host-local prints nothing; only a problem may): %s", what, o.Stderr)
	}
}

// TestVerbADD: ADD returns one address of the range with the range's
// gateway, reserves it in the store for exactly this attachment (pending,
// with the pod's namespace, name, UID and netns from the call), gives another
// attachment another address, and prints nothing on stderr.
func TestVerbADD(t *testing.T) {
	h := newHardNet(t, "verb-add", 0)
	o := h.run("ADD", "c000")
	if !o.OK() {
		t.Fatalf("ADD: %v", o)
	}
	quiet(t, "ADD", o)
	var res struct {
		IPs []struct {
			Address string `json:"address"`
			Gateway string `json:"gateway"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(o.Stdout, &res); err != nil || len(res.IPs) != 1 {
		t.Fatalf("ADD result %s: want one address (%v)", o.Stdout, err)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil || p.Bits() != 24 || !netip.MustParsePrefix("10.81.0.0/24").Contains(p.Addr()) || res.IPs[0].Gateway != "10.81.0.1" {
		t.Errorf("ADD result %s: want an address of 10.81.0.0/24 as /24 via gateway 10.81.0.1", o.Stdout)
	}
	recs := readStore(t, h.path).Records
	if len(recs) != 1 {
		t.Fatalf("store holds %d records after one ADD, want 1", len(recs))
	}
	r := recs[0]
	want := allocator.Owner{ContainerID: "c000", IfName: "eth0", Netns: "/var/run/netns/c000",
		PodNamespace: "ns", PodName: "pod-c000", PodUID: "uid-c000"}
	if r.IP != p.Addr() || r.State != allocator.StatePending || r.Network != h.network ||
		r.ContainerID != want.ContainerID || r.IfName != want.IfName || r.Netns != want.Netns ||
		r.PodNamespace != want.PodNamespace || r.PodName != want.PodName || r.PodUID != want.PodUID {
		t.Errorf("record %+v: want %s pending in network %s for %+v", r, p.Addr(), h.network, want)
	}
	if second := h.mustAdd(t, "c001"); second == p.Addr() {
		t.Errorf("a second attachment got %s, the first one's address", second)
	}
	checkIntegrity(t, readStore(t, h.path))
}

// TestVerbDEL: DEL releases the attachment's addresses and nothing else, and
// succeeds silently for what holds nothing (again, a container never seen, a
// network with no store); a store it cannot read still succeeds but says so.
func TestVerbDEL(t *testing.T) {
	h := newHardNet(t, "verb-del", 2)
	o := h.run("DEL", "c000")
	if !o.OK() {
		t.Fatalf("DEL: %v", o)
	}
	quiet(t, "DEL", o)
	held := h.held(t)
	if len(held["c000"]) != 0 || !slices.Equal(held["c001"], []netip.Addr{h.ips["c001"]}) {
		t.Errorf("after DEL c000 the store holds %v, want c001's %s only", held, h.ips["c001"])
	}
	for _, id := range []string{"c000", "never-seen"} {
		o := h.run("DEL", id)
		if !o.OK() {
			t.Errorf("DEL %s holding nothing: %v", id, o)
		}
		quiet(t, "DEL of "+id+", which holds nothing,", o)
	}
	if got := h.held(t); len(got) != 1 || len(got["c001"]) != 1 {
		t.Errorf("DELs that held nothing changed the store: %v", got)
	}

	empty := newHardNet(t, "verb-del-nostore", 0)
	o = empty.run("DEL", "c000")
	if !o.OK() {
		t.Errorf("DEL on a network with no store: %v", o)
	}
	quiet(t, "DEL on a network with no store", o)

	bad := newHardNet(t, "verb-del-garbage", 0)
	if err := os.WriteFile(bad.path, []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	o = bad.run("DEL", "c000")
	if !o.OK() {
		t.Errorf("DEL on an unreadable store: %v", o)
	}
	if !strings.Contains(string(o.Stderr), "level=WARN") || !strings.Contains(string(o.Stderr), "unreadable") {
		t.Errorf("DEL on an unreadable store printed %q: want a warning that it is unreadable", o.Stderr)
	}
}

// TestVerbDELNamingNoRange: a DEL whose ipam names no range (what Multus
// v4.3.0 sends for its cluster network: the config rebuilt from CNI's schema,
// no ranges) releases the attachment's addresses from the store of the
// network's name and dataDir, and nothing else; with no store it succeeds.
// host-local refuses that DEL (test/differential), and the pod is never
// deleted.
func TestVerbDELNamingNoRange(t *testing.T) {
	h := newHardNet(t, "verb-del-norange", 2)
	stripped := func(dir string) []byte {
		return []byte(`{"cniVersion":"1.1.0","name":"` + h.network + `","type":"bridge","ipam":{"type":"hostlease","dataDir":"` + dir + `"}}`)
	}
	o := runPlugin(h.ctx, h.call("DEL", "c000"), stripped(h.dir))
	if !o.OK() {
		t.Fatalf("DEL naming no range: %v", o)
	}
	held := h.held(t)
	if len(held["c000"]) != 0 || !slices.Equal(held["c001"], []netip.Addr{h.ips["c001"]}) {
		t.Errorf("after DEL c000 naming no range the store holds %v, want c001's %s only", held, h.ips["c001"])
	}
	if o := runPlugin(h.ctx, h.call("DEL", "c000"), stripped(t.TempDir())); !o.OK() {
		t.Errorf("DEL naming no range, a data dir with no store: %v", o)
	}
	if o := runPlugin(h.ctx, h.call("ADD", "c002"), stripped(h.dir)); o.OK() || o.Err == nil || o.Err.Code != 7 {
		t.Errorf("ADD naming no range: %v; want code 7", o)
	}
	checkIntegrity(t, readStore(t, h.path))
}

// TestVerbCHECK: CHECK succeeds when prevResult lists the attachment's
// reservations (addresses outside our range sets are other plugins'), and
// fails when one is missing from it, when it lists an address of our range
// not reserved for this attachment, and for an attachment holding nothing.
func TestVerbCHECK(t *testing.T) {
	h := newHardNet(t, "verb-check", 2)
	own, other := h.ips["c000"].String(), h.ips["c001"].String()
	check := func(prev json.RawMessage, id string) outcome {
		return runPlugin(h.ctx, h.call("CHECK", id), withKeys(t, h.conf, map[string]any{"prevResult": prev}))
	}
	for _, tc := range []struct {
		name string
		prev json.RawMessage
	}{
		{"its own address", prevResultOf(own)},
		{"its own address and one outside the range sets", prevResultOf(own, "192.0.2.7")},
	} {
		o := check(tc.prev, "c000")
		if !o.OK() {
			t.Errorf("CHECK with prevResult listing %s: %v", tc.name, o)
		}
		quiet(t, "CHECK", o)
	}
	for _, tc := range []struct {
		name, id, want string
		prev           json.RawMessage
		code           uint
	}{
		{"missing its address", "c000", own, prevResultOf(), types.ErrInternal},
		{"listing another attachment's address of our range", "c000", other, prevResultOf(own, other), types.ErrInternal},
		{"listing a free address of our range", "c000", "10.81.0.200", prevResultOf(own, "10.81.0.200"), types.ErrInternal},
		{"for an attachment holding nothing", "never-seen", "never-seen", prevResultOf(own), types.ErrUnknownContainer},
	} {
		o := check(tc.prev, tc.id)
		if o.Err == nil || o.Err.Code != tc.code || !strings.Contains(o.Err.Msg, tc.want) {
			t.Errorf("CHECK %s: got %v, want CNI error %d naming %s", tc.name, o, tc.code, tc.want)
		}
	}
}

// TestVerbGC: GC releases every reservation of the network whose attachment
// is not in cni.dev/valid-attachments (or its cni.dev/attachments spelling;
// an empty list is a list), silently; a GC with no list (cnitool v1.3.1 sends
// none) releases nothing, succeeds, and says why on stderr.
func TestVerbGC(t *testing.T) {
	h := newHardNet(t, "verb-gc", 3)
	gc := func(kv map[string]any) outcome {
		return runPlugin(h.ctx, h.call("GC", ""), withKeys(t, h.conf, kv))
	}
	list := func(ids ...string) []map[string]string {
		out := []map[string]string{}
		for _, id := range ids {
			out = append(out, map[string]string{"containerID": id, "ifname": "eth0"})
		}
		return out
	}
	steps := []struct {
		name string
		kv   map[string]any
		left []string
	}{
		{"without the key", nil, []string{"c000", "c001", "c002"}},
		{"with a null list", map[string]any{"cni.dev/valid-attachments": nil}, []string{"c000", "c001", "c002"}},
		{"keeping c000 and c001", map[string]any{"cni.dev/valid-attachments": list("c000", "c001")}, []string{"c000", "c001"}},
		{"keeping c000 (cni.dev/attachments)", map[string]any{"cni.dev/attachments": list("c000")}, []string{"c000"}},
		{"with an empty list", map[string]any{"cni.dev/valid-attachments": list()}, nil},
	}
	for _, s := range steps {
		o := gc(s.kv)
		if !o.OK() {
			t.Errorf("GC %s: %v", s.name, o)
		}
		if s.kv == nil || s.kv["cni.dev/valid-attachments"] == nil && s.kv["cni.dev/attachments"] == nil {
			if !strings.Contains(string(o.Stderr), "level=WARN") || !strings.Contains(string(o.Stderr), "cni.dev/valid-attachments") {
				t.Errorf("GC %s printed %q: want a warning naming cni.dev/valid-attachments (why nothing was released)", s.name, o.Stderr)
			}
		} else {
			quiet(t, "GC "+s.name, o)
		}
		var left []string
		for id := range h.held(t) {
			left = append(left, id)
		}
		slices.Sort(left)
		if !slices.Equal(left, s.left) {
			t.Errorf("after GC %s the store holds %v, want %v", s.name, left, s.left)
		}
	}
	checkIntegrity(t, readStore(t, h.path))

	none := newHardNet(t, "verb-gc-nostore", 0)
	if o := runPlugin(none.ctx, none.call("GC", ""), withKeys(t, none.conf, map[string]any{"cni.dev/valid-attachments": list()})); !o.OK() {
		t.Errorf("GC on a network with no store: %v", o)
	}
	if _, err := os.Lstat(none.path); err == nil {
		t.Errorf("GC on a network with no store created %s", none.path)
	}
}

// TestVerbSTATUS: STATUS succeeds while ADD can succeed and, by default, on a
// full pool too; with failStatusOnExhaustion it fails with code 50 on a full
// pool and recovers once an address is free.
func TestVerbSTATUS(t *testing.T) {
	h := newHardNet(t, "verb-status", 0)
	// 10.82.0.0/30: .1 is the gateway, .2 the only allocatable address.
	h.conf = ipamConf(t, h.network, h.dir, "10.82.0.0/30")
	strict := withKeys(t, h.conf, nil)
	var m map[string]any
	_ = json.Unmarshal(strict, &m)
	m["ipam"].(map[string]any)["failStatusOnExhaustion"] = true
	strict, _ = json.Marshal(m)
	status := func(conf []byte) outcome { return runPlugin(h.ctx, h.call("STATUS", ""), conf) }

	for name, conf := range map[string][]byte{"default": h.conf, "failStatusOnExhaustion": strict} {
		if o := status(conf); !o.OK() {
			t.Errorf("STATUS (%s) before any ADD: %v", name, o)
		}
	}
	h.mustAdd(t, "c000")
	if o := status(h.conf); !o.OK() {
		t.Errorf("STATUS (default) on a full pool: %v; want success (a STATUS error makes the node NotReady)", o)
	}
	if o := status(strict); o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable {
		t.Errorf("STATUS (failStatusOnExhaustion) on a full pool: %v; want CNI error 50", o)
	}
	if o := h.run("DEL", "c000"); !o.OK() {
		t.Fatalf("DEL: %v", o)
	}
	if o := status(strict); !o.OK() {
		t.Errorf("STATUS (failStatusOnExhaustion) once the pool has room: %v", o)
	}
}

// TestVerbVERSION: VERSION names every spec version a runtime may call the
// plugin with, up to 1.1.0 (GC and STATUS).
func TestVerbVERSION(t *testing.T) {
	h := newHardNet(t, "verb-version", 0)
	o := runPlugin(h.ctx, call{Command: "VERSION"}, []byte(`{"cniVersion":"1.1.0"}`))
	if !o.OK() {
		t.Fatalf("VERSION: %v", o)
	}
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(o.Stdout, &v); err != nil {
		t.Fatalf("VERSION output %s: %v", o.Stdout, err)
	}
	for _, want := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		if !slices.Contains(v.SupportedVersions, want) {
			t.Errorf("VERSION lists %v: missing %s", v.SupportedVersions, want)
		}
	}
}

// TestVerbMarker: the commit marker (the last entry, no ipam) ADD marks the
// attachment's reservations committed and passes prevResult through
// unchanged; its CHECK fails while a reservation is pending and succeeds once
// committed; its DEL releases nothing (the ipam entry's DEL does). Finding
// no store (the ipam entry is not hostlease, or its dataDir differs), its ADD
// still passes prevResult through, and warns.
func TestVerbMarker(t *testing.T) {
	h := newHardNet(t, "verb-marker", 2)
	prev := prevResultOf(h.ips["c000"].String())
	marker := func(cmd string, prev json.RawMessage) outcome {
		return runPlugin(h.ctx, h.call(cmd, "c000"), h.markerConf(t, prev))
	}
	state := func(id string) allocator.State {
		recs := recordsOf(t, h.path, id, "eth0")
		if len(recs) != 1 {
			t.Fatalf("%s holds %d records, want 1", id, len(recs))
		}
		return recs[0].State
	}

	o := marker("CHECK", prev)
	if o.Err == nil || !strings.Contains(o.Err.Msg, "pending") {
		t.Errorf("marker CHECK on a pending reservation: %v; want an error saying it is pending", o)
	}

	o = marker("ADD", prev)
	if !o.OK() {
		t.Fatalf("marker ADD: %v", o)
	}
	quiet(t, "marker ADD", o)
	var got, want any
	if json.Unmarshal(o.Stdout, &got) != nil || json.Unmarshal(prev, &want) != nil || !jsonEqual(got, want) {
		t.Errorf("marker ADD printed %s; want prevResult passed through: %s", o.Stdout, prev)
	}
	if s := state("c000"); s != allocator.StateCommitted {
		t.Errorf("after the marker's ADD c000 is %q, want committed", s)
	}
	if s := state("c001"); s != allocator.StatePending {
		t.Errorf("the marker's ADD for c000 changed c001 to %q", s)
	}

	o = marker("CHECK", prev)
	if !o.OK() {
		t.Errorf("marker CHECK on a committed reservation: %v", o)
	}
	quiet(t, "marker CHECK", o)

	o = marker("DEL", nil)
	if !o.OK() {
		t.Errorf("marker DEL: %v", o)
	}
	quiet(t, "marker DEL", o)
	if held := h.held(t); len(held["c000"]) != 1 {
		t.Errorf("the marker's DEL released c000 (%v): only the ipam entry's DEL releases", held)
	}

	// No store where the marker looks: the ipam entry is not hostlease, or
	// its dataDir differs. The chain's result still passes, with a warning.
	other := newHardNet(t, "verb-marker-nostore", 0)
	o = runPlugin(other.ctx, other.call("ADD", "c000"), other.markerConf(t, prev))
	if !o.OK() || !jsonEqual(decoded(t, o.Stdout), decoded(t, prev)) {
		t.Errorf("marker ADD with no store: %v, printed %s; want prevResult passed through", o, o.Stdout)
	}
	if !strings.Contains(string(o.Stderr), "level=WARN") || !strings.Contains(string(o.Stderr), "dataDir") {
		t.Errorf("marker ADD with no store printed %q: want a warning naming the likely cause (ipam type, dataDir)", o.Stderr)
	}
}

// decoded is b as a decoded JSON value (nil when it does not decode).
func decoded(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Errorf("%q: %v", b, err)
	}
	return v
}

// jsonEqual compares two decoded JSON values.
func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
