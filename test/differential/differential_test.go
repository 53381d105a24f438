// Package differential runs the real host-local plugin and hostlease side by
// side on the same random sequences of CNI operations and asserts that a user
// sees the same outcome from both: success or failure, addresses, gateways,
// routes and DNS (an ADD's result byte for byte), and the same error messages.
package differential

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

var binDir string

// TestMain builds host-local (the version pinned in go.mod) and hostlease.
func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, "differential", map[string]string{"host-local": testbin.HostLocal, "hostlease": testbin.Plugin}, &binDir))
}

// plugin is one of the two binaries with its own data dir.
type plugin struct {
	name    string // "host-local" or "hostlease"
	bin     string
	dataDir string
}

func newPlugins(t *testing.T) (hostLocal, hostLease plugin) {
	return plugin{"host-local", filepath.Join(binDir, "host-local"), t.TempDir()},
		plugin{"hostlease", filepath.Join(binDir, "hostlease"), t.TempDir()}
}

// op is one CNI call.
type op struct {
	cmd         string // ADD or DEL
	containerID string
	ifname      string
	cniArgs     string
	argsIPs     []string // args.cni.ips
	runtimeIPs  []string // runtimeConfig.ips
	why         string   // the generator's intent, for failure messages
}

func (o op) String() string {
	s := fmt.Sprintf("%s %s/%s (%s)", o.cmd, o.containerID, o.ifname, o.why)
	if o.cniArgs != "" {
		s += " CNI_ARGS=" + o.cniArgs
	}
	if o.argsIPs != nil {
		s += fmt.Sprintf(" args.cni.ips=%v", o.argsIPs)
	}
	if o.runtimeIPs != nil {
		s += fmt.Sprintf(" runtimeConfig.ips=%v", o.runtimeIPs)
	}
	return s
}

// outcome is what the runtime sees from one call.
type outcome struct {
	ok     bool
	result map[string]any // ADD's result on success
	code   float64
	msg    string
	raw    string
}

// config renders a network config for dataDir. ipam is the ipam section's
// body without dataDir.
type config struct {
	name     string
	version  string
	ipam     string
	universe []string // addresses requests are drawn from (in, at the edges of and outside the ranges)
	sets     int      // range sets: at most one requested address per set
}

func (c config) render(p plugin, o op) []byte {
	doc := map[string]any{}
	if err := json.Unmarshal([]byte(`{"cniVersion":"`+c.version+`","name":"`+c.name+`","type":"bridge","ipam":{"type":"`+p.name+`",`+c.ipam+`}}`), &doc); err != nil {
		panic(fmt.Sprintf("config %s: %v", c.name, err))
	}
	doc["ipam"].(map[string]any)["dataDir"] = p.dataDir
	if o.argsIPs != nil {
		doc["args"] = map[string]any{"cni": map[string]any{"ips": o.argsIPs}}
	}
	if o.runtimeIPs != nil {
		doc["runtimeConfig"] = map[string]any{"ips": o.runtimeIPs}
	}
	b, _ := json.Marshal(doc)
	return b
}

func (p plugin) run(t *testing.T, c config, o op) outcome {
	out := execCNI(t, p.bin, c.render(p, o), o)
	if out.ok && o.cmd == "ADD" {
		if err := json.Unmarshal([]byte(out.raw), &out.result); err != nil {
			t.Fatalf("%s %s: result is not JSON: %q", p.name, o, out.raw)
		}
	}
	return out
}

// execCNI runs the plugin binary bin once for o with stdin as given; a
// failure's CNI error code and message are decoded from stdout.
func execCNI(t *testing.T, bin string, stdin []byte, o op) outcome {
	t.Helper()
	name := filepath.Base(bin)
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = []string{
		"CNI_COMMAND=" + o.cmd,
		"CNI_CONTAINERID=" + o.containerID,
		"CNI_NETNS=/var/run/netns/" + o.containerID,
		"CNI_IFNAME=" + o.ifname,
		"CNI_ARGS=" + o.cniArgs,
		"CNI_PATH=" + binDir,
		"PATH=/usr/bin:/bin",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := outcome{ok: err == nil, raw: stdout.String()}
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("%s: %v", name, err)
	}
	if !out.ok {
		var e struct {
			Code float64 `json:"code"`
			Msg  string  `json:"msg"`
		}
		if jerr := json.Unmarshal(stdout.Bytes(), &e); jerr != nil || e.Msg == "" {
			t.Fatalf("%s %s: exit %v without a CNI error on stdout: %q (stderr %q)", name, o, err, stdout.String(), stderr.String())
		}
		out.code, out.msg = e.Code, e.Msg
	}
	return out
}

// normalizeMsg removes differences that carry no meaning. host-local lists
// requested IPs it could not place in random order (it ranges over a map);
// both lists are sorted.
//
// hostlease prefixes a CNI_ARGS parse error with "CNI_ARGS: " to name what
// is wrong (contracts.md: errors name the field); host-local's text follows
// it unchanged, so the prefix is dropped before comparing.
func normalizeMsg(msg string) string {
	msg = strings.TrimPrefix(msg, "CNI_ARGS: ")
	const leftovers = "failed to allocate all requested IPs:"
	if rest, ok := strings.CutPrefix(msg, leftovers); ok {
		f := strings.Fields(rest)
		sort.Strings(f)
		return leftovers + " " + strings.Join(f, " ")
	}
	return msg
}

// both runs o against both plugins at once and asserts equal outcomes.
func both(t *testing.T, c config, hlp, hlease plugin, o op) outcome {
	t.Helper()
	var a, b outcome
	var wg sync.WaitGroup
	wg.Go(func() { a = hlp.run(t, c, o) })
	b = hlease.run(t, c, o)
	wg.Wait()
	if a.ok != b.ok {
		t.Fatalf("%s: host-local ok=%v %s\nhostlease ok=%v %s", o, a.ok, a.raw, b.ok, b.raw)
	}
	if a.ok && !reflect.DeepEqual(a.result, b.result) {
		t.Fatalf("%s: results differ\nhost-local: %s\nhostlease:  %s", o, a.raw, b.raw)
	}
	// Byte for byte: clients parse the result, and some compare or hash it.
	if a.ok && o.cmd == "ADD" && a.raw != b.raw {
		t.Fatalf("%s: results are equal as JSON but not byte for byte\nhost-local: %q\nhostlease:  %q", o, a.raw, b.raw)
	}
	if !a.ok {
		// hostlease's codes are its own (contracts.md); host-local answers 999
		// for everything it does not get from skel.
		if normalizeMsg(a.msg) != normalizeMsg(b.msg) {
			t.Fatalf("%s: error messages differ\nhost-local (%v): %s\nhostlease  (%v): %s", o, a.code, a.msg, b.code, b.msg)
		}
		if b.code == 999 || b.code == 0 {
			t.Fatalf("%s: hostlease answered code %v for %q; want one of its documented codes", o, b.code, b.msg)
		}
	}
	return b
}

// hostLocalState reads host-local's data dir: address -> "id\r\nifname", and
// the last reserved address per range set.
func hostLocalState(t *testing.T, dir string) (map[string]string, map[int]string) {
	t.Helper()
	held, last := map[string]string{}, map[int]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if idx, ok := strings.CutPrefix(e.Name(), "last_reserved_ip."); ok {
			i, _ := strconv.Atoi(idx)
			last[i] = string(b)
		} else if _, err := netip.ParseAddr(e.Name()); err == nil {
			held[e.Name()] = string(b)
		}
	}
	return held, last
}

// hostLeaseState reads the same from hostlease's store.
func hostLeaseState(t *testing.T, dir, network string, sets int) (map[string]string, map[int]string) {
	t.Helper()
	held, last := map[string]string{}, map[int]string{}
	s, err := store.Open(store.FilePath(dir, network), store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if os.IsNotExist(err) {
		return held, last
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.View(func(tx *store.Tx) error {
		for i := range sets {
			if ip, ok := tx.LastReserved(i); ok {
				last[i] = ip.String()
			}
		}
		return tx.ForEach(func(r *allocator.Record) error {
			v := r.ContainerID
			if r.IfName != "" {
				v += "\r\n" + r.IfName
			}
			held[r.IP.String()] = v
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return held, last
}

func sameState(t *testing.T, c config, hlp, hlease plugin, step int) {
	t.Helper()
	hlHeld, hlLast := hostLocalState(t, filepath.Join(hlp.dataDir, c.name))
	leHeld, leLast := hostLeaseState(t, hlease.dataDir, c.name, c.sets)
	if !reflect.DeepEqual(hlHeld, leHeld) {
		t.Fatalf("after op %d: reservations differ\nhost-local: %q\nhostlease:  %q", step, hlHeld, leHeld)
	}
	if !reflect.DeepEqual(hlLast, leLast) {
		t.Fatalf("after op %d: last reserved differ\nhost-local: %v\nhostlease:  %v", step, hlLast, leLast)
	}
}

func hosts(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func hosts6(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s%x", prefix, i))
	}
	return out
}

func configs(t *testing.T) []config {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(resolv, []byte("# generated\nnameserver 10.96.0.10\nnameserver 8.8.8.8\nsearch default.svc.cluster.local svc.cluster.local\noptions ndots:5 edns0\ndomain cluster.local\n;x\n"), 0o644)
	return []config{{
		name: "small", version: "1.0.0", sets: 1,
		ipam:     `"ranges":[[{"subnet":"10.10.0.0/28"}]]`,
		universe: append(hosts("10.10.0.", 0, 15), "10.10.1.3", "192.168.0.1"),
	}, {
		name: "bounds", version: "1.0.0", sets: 1,
		ipam:     `"ranges":[[{"subnet":"10.20.0.0/27","rangeStart":"10.20.0.5","rangeEnd":"10.20.0.17"}]]`,
		universe: hosts("10.20.0.", 0, 20),
	}, {
		name: "gateway", version: "0.4.0", sets: 1,
		ipam:     `"ranges":[[{"subnet":"10.30.0.0/28","gateway":"10.30.0.7"}]]`,
		universe: hosts("10.30.0.", 0, 15),
	}, {
		name: "multi", version: "1.0.0", sets: 1,
		ipam:     `"ranges":[[{"subnet":"10.40.0.0/29"},{"subnet":"10.40.1.0/29","rangeStart":"10.40.1.3"},{"subnet":"10.40.2.0/29","gateway":"10.40.2.6"}]]`,
		universe: slices.Concat(hosts("10.40.0.", 0, 7), hosts("10.40.1.", 0, 7), hosts("10.40.2.", 0, 7)),
	}, {
		name: "dual", version: "1.1.0", sets: 2,
		ipam:     `"ranges":[[{"subnet":"10.50.0.0/28"}],[{"subnet":"fd00:50::/124","rangeEnd":"fd00:50::c"}]]`,
		universe: slices.Concat(hosts("10.50.0.", 0, 15), hosts6("fd00:50::", 0, 15)),
	}, {
		name: "legacy", version: "0.2.0", sets: 1, // 0.2.0 results: ip4/ip6 objects
		ipam:     `"subnet":"10.60.0.0/28","rangeStart":"10.60.0.2","rangeEnd":"10.60.0.12","gateway":"10.60.0.1"`,
		universe: hosts("10.60.0.", 0, 15),
	}, {
		name: "routes", version: "1.0.0", sets: 1,
		ipam: `"ranges":[[{"subnet":"10.70.0.0/28"}]],"resolvConf":"` + resolv + `",
			"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.70.0.1"},{"dst":"fd00::/8"}]`,
		universe: hosts("10.70.0.", 0, 15),
	}}
}

// familyOf groups requestable addresses so that one ADD asks for at most
// one address per family (the configs have one range set per family):
// host-local picks among several in a range set at random.
func familyOf(ip string) int {
	if strings.Contains(ip, ":") {
		return 1
	}
	return 0
}

type attachment struct{ id, ifname string }

// generator draws operations: new ADDs (some with requested addresses), ADDs
// repeating a live attachment, DELs of live, unknown and deleted attachments.
type generator struct {
	r       *rand.Rand
	c       config
	next    int
	live    []attachment
	deleted []attachment
	// fill makes every op a new plain ADD: set when a run's last third starts
	// without an exhaustion yet, so every seed exercises the full pool.
	fill bool
}

func (g *generator) requested() (cniArgs string, argsIPs, runtimeIPs []string) {
	cniArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-" + strconv.Itoa(g.next)
	picked := map[int]string{}
	for range 1 + g.r.IntN(g.c.sets) {
		ip := g.c.universe[g.r.IntN(len(g.c.universe))]
		picked[familyOf(ip)] = ip
	}
	for _, fam := range []int{0, 1} {
		ip, ok := picked[fam]
		if !ok {
			continue
		}
		switch g.r.IntN(4) {
		case 0:
			if !strings.Contains(cniArgs, ";IP=") {
				cniArgs += ";IP=" + ip
			} else {
				argsIPs = append(argsIPs, ip)
			}
		case 1:
			if g.r.IntN(2) == 0 { // ip.IP also takes CIDR notation
				ip += map[int]string{0: "/24", 1: "/64"}[fam]
			}
			argsIPs = append(argsIPs, ip)
		case 2:
			runtimeIPs = append(runtimeIPs, ip)
		case 3: // the same address from two sources is one request
			if !strings.Contains(cniArgs, ";IP=") {
				cniArgs += ";IP=" + ip
			}
			runtimeIPs = append(runtimeIPs, ip)
		}
	}
	return cniArgs, argsIPs, runtimeIPs
}

func (g *generator) op() op {
	p := g.r.IntN(100)
	if g.fill {
		p = 44 // "new": an ADD for a fresh container
	}
	pick := func(list []attachment) attachment { return list[g.r.IntN(len(list))] }
	switch {
	case p < 2:
		g.next++
		bad := []string{"IgnoreUnknown=1;IP=" + g.c.universe[0] + "0", "K8S_POD_NAME=x", "IgnoreUnknown=1;IP=ten", "IgnoreUnknown=1;garbage"}
		return op{cmd: []string{"ADD", "DEL"}[g.r.IntN(2)], containerID: fmt.Sprintf("c%04d", g.next), ifname: "eth0",
			cniArgs: bad[g.r.IntN(len(bad))], why: "malformed CNI_ARGS"}
	case p < 45 || len(g.live) == 0:
		g.next++
		o := op{cmd: "ADD", containerID: fmt.Sprintf("c%04d", g.next), ifname: "eth0", why: "new"}
		if g.r.IntN(8) == 0 {
			o.ifname = "net1"
		}
		switch n := g.r.IntN(10); {
		case n < 3:
			o.cniArgs, o.argsIPs, o.runtimeIPs = g.requested()
			o.why = "new, requested"
		case n < 5:
			o.cniArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-" + strconv.Itoa(g.next) + ";K8S_POD_INFRA_CONTAINER_ID=" + o.containerID
		}
		return o
	case p < 55:
		a := pick(g.live)
		o := op{cmd: "ADD", containerID: a.id, ifname: a.ifname, why: "duplicate of a live attachment"}
		if g.r.IntN(3) == 0 {
			o.cniArgs, o.argsIPs, o.runtimeIPs = g.requested()
			o.why += ", requested"
		}
		return o
	case p < 60:
		// Another interface of a live container.
		a := pick(g.live)
		return op{cmd: "ADD", containerID: a.id, ifname: "net" + strconv.Itoa(1+g.r.IntN(2)), why: "second interface"}
	case p < 88:
		a := pick(g.live)
		return op{cmd: "DEL", containerID: a.id, ifname: a.ifname, why: "live"}
	case p < 94 || len(g.deleted) == 0:
		return op{cmd: "DEL", containerID: fmt.Sprintf("unknown%d", g.r.IntN(1000)), ifname: "eth0", why: "unknown"}
	default:
		a := pick(g.deleted)
		return op{cmd: "DEL", containerID: a.id, ifname: a.ifname, why: "repeated"}
	}
}

// record tracks which attachments exist, to aim later operations.
func (g *generator) record(o op, out outcome) {
	a := attachment{o.containerID, o.ifname}
	switch {
	case o.cmd == "ADD" && out.ok && !slices.Contains(g.live, a):
		g.live = append(g.live, a)
	case o.cmd == "DEL":
		if i := slices.Index(g.live, a); i >= 0 {
			g.live = slices.Delete(g.live, i, i+1)
			g.deleted = append(g.deleted, a)
		}
	}
}

// baseSeed is HOSTLEASE_DIFF_SEED when set (to replay a failure), else random.
func baseSeed(t *testing.T) uint64 {
	if s := os.Getenv("HOSTLEASE_DIFF_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HOSTLEASE_DIFF_SEED: %v", err)
		}
		return v
	}
	return rand.Uint64()
}

func opsPerConfig() int {
	if n, err := strconv.Atoi(os.Getenv("HOSTLEASE_DIFF_OPS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 60
	}
	return 300
}

// TestDifferential runs the same random operations against host-local and
// hostlease for each config and compares every outcome and, periodically,
// the reservations and round-robin points each keeps on disk.
func TestDifferential(t *testing.T) {
	seed := baseSeed(t)
	n := opsPerConfig()
	t.Logf("seed %d, %d ops per config (replay: HOSTLEASE_DIFF_SEED=%d)", seed, n, seed)
	for i, c := range configs(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cseed := seed + uint64(i)
			defer func() {
				if t.Failed() {
					t.Logf("config %s: seed %d (replay the whole run with HOSTLEASE_DIFF_SEED=%d)", c.name, cseed, seed)
				}
			}()
			hlp, hlease := newPlugins(t)
			g := &generator{r: rand.New(rand.NewPCG(cseed, 0x5eed)), c: c}
			var adds, addFails, dels, exhausted int
			for step := range n {
				g.fill = exhausted == 0 && step >= 2*n/3
				o := g.op()
				out := both(t, c, hlp, hlease, o)
				g.record(o, out)
				if o.cmd == "ADD" {
					adds++
					if !out.ok {
						addFails++
						if strings.Contains(out.msg, "no IP addresses available") {
							exhausted++
						}
					}
				} else {
					dels++
				}
				if step%50 == 49 {
					sameState(t, c, hlp, hlease, step)
				}
			}
			sameState(t, c, hlp, hlease, n)
			t.Logf("%d ADDs (%d failed, %d exhausted), %d DELs", adds, addFails, exhausted, dels)
			// The run must have exercised reuse and exhaustion, or it proves little.
			if n >= 200 && (exhausted == 0 || addFails == exhausted) {
				t.Errorf("the sequence never exhausted the pool or never failed otherwise (%d failures, %d exhausted)", addFails, exhausted)
			}
		})
	}
}

// TestImportHostLocalState lets the real host-local build up state, then
// points hostlease at the same data dir (first use imports it) while
// host-local carries on in a copy of that dir: both must keep making the same
// choices, so hostlease never hands out an address host-local holds and
// continues round robin from host-local's last_reserved_ip.
func TestImportHostLocalState(t *testing.T) {
	for _, firstUse := range []string{"ADD", "DEL"} {
		t.Run("first use by "+firstUse, func(t *testing.T) {
			t.Parallel()
			c := config{name: "migrate", version: "1.0.0", sets: 2,
				ipam: `"ranges":[[{"subnet":"10.80.0.0/28"}],[{"subnet":"fd00:80::/124"}]]`}
			hlp, hlease := newPlugins(t)
			shared := hlp // host-local's original data dir, soon hostlease's
			for i := range 9 {
				out := hlp.run(t, c, op{cmd: "ADD", containerID: fmt.Sprint("hl", i), ifname: "eth0"})
				if !out.ok {
					t.Fatalf("host-local ADD: %s", out.raw)
				}
			}
			for _, id := range []string{"hl1", "hl2", "hl7"} {
				if out := hlp.run(t, c, op{cmd: "DEL", containerID: id, ifname: "eth0"}); !out.ok {
					t.Fatalf("host-local DEL: %s", out.raw)
				}
			}
			// holds: address -> the host-local container holding it.
			held, last := hostLocalState(t, filepath.Join(shared.dataDir, c.name))
			holds := map[string]string{}
			for ip, owner := range held {
				holds[ip], _, _ = strings.Cut(owner, "\r\n")
			}
			if last[0] != "10.80.0.10" || len(held) != 12 {
				t.Fatalf("host-local state: %d held, last %v", len(held), last)
			}
			// host-local continues in a copy; hostlease takes over the original.
			copyDir(t, filepath.Join(shared.dataDir, c.name), filepath.Join(hlease.dataDir, c.name))
			hostLocal := plugin{"host-local", hlp.bin, hlease.dataDir}
			hostLease := plugin{"hostlease", hlease.bin, shared.dataDir}

			ops := []op{{cmd: "ADD", containerID: "new0", ifname: "eth0"}}
			if firstUse == "DEL" {
				ops = []op{{cmd: "DEL", containerID: "hl4", ifname: "eth0"}, {cmd: "ADD", containerID: "new0", ifname: "eth0"}}
			}
			for i := 1; i < 12; i++ {
				ops = append(ops, op{cmd: "ADD", containerID: fmt.Sprint("new", i), ifname: "eth0"})
			}
			ops = append(ops, op{cmd: "DEL", containerID: "hl0", ifname: "eth0"}, op{cmd: "DEL", containerID: "hl8", ifname: "eth0"},
				op{cmd: "ADD", containerID: "hl0", ifname: "eth0"}, op{cmd: "ADD", containerID: "new20", ifname: "eth0"},
				op{cmd: "ADD", containerID: "hl3", ifname: "eth0"}) // still holds its addresses: a duplicate
			var firstAddr string
			for _, o := range ops {
				o.why = "after migration"
				out := both(t, c, hostLocal, hostLease, o)
				if o.cmd == "DEL" {
					maps.DeleteFunc(holds, func(_, id string) bool { return id == o.containerID })
				}
				if o.cmd != "ADD" || !out.ok {
					continue
				}
				for _, ipc := range out.result["ips"].([]any) {
					addr := strings.Split(ipc.(map[string]any)["address"].(string), "/")[0]
					if firstAddr == "" {
						firstAddr = addr
					}
					if id, ok := holds[addr]; ok {
						t.Fatalf("%s got %s, which host-local's %s holds", o, addr, id)
					}
				}
			}
			if firstAddr != "10.80.0.11" {
				t.Errorf("first hostlease ADD got %s, want 10.80.0.11 (after host-local's last_reserved_ip.0 10.80.0.10)", firstAddr)
			}
			// hostlease's store now matches host-local's files in the copy.
			hlHeld, hlLast := hostLocalState(t, filepath.Join(hostLocal.dataDir, c.name))
			leHeld, leLast := hostLeaseState(t, hostLease.dataDir, c.name, c.sets)
			if !reflect.DeepEqual(hlHeld, leHeld) || !reflect.DeepEqual(hlLast, leLast) {
				t.Fatalf("state differs\nhost-local: %q %v\nhostlease:  %q %v", hlHeld, hlLast, leHeld, leLast)
			}
		})
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
