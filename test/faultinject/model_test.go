package faultinject

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/fakecri"
)

const network = "finet"

// The pool: 10.66.0.10 .. 10.66.0.109 (100 addresses), gateway 10.66.0.1.
var (
	rangeStart = netip.MustParseAddr("10.66.0.10")
	rangeEnd   = netip.MustParseAddr("10.66.0.109")
)

func netConf(dataDir string) []byte {
	b, err := json.Marshal(map[string]any{
		"cniVersion": "1.1.0",
		"name":       network,
		"type":       "bridge",
		"ipam": map[string]any{
			"type":        "hostlease",
			"dataDir":     dataDir,
			"lockTimeout": "20s",
			"ranges": [][]map[string]string{{{
				"subnet": "10.66.0.0/24", "rangeStart": rangeStart.String(), "rangeEnd": rangeEnd.String(), "gateway": "10.66.0.1",
			}}},
		},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// gcConf is netConf with the GC verb's list of attachments still in use.
func gcConf(dataDir string, valid []string) []byte {
	var m map[string]any
	_ = json.Unmarshal(netConf(dataDir), &m)
	atts := []map[string]string{}
	for _, id := range valid {
		atts = append(atts, map[string]string{"containerID": id, "ifname": "eth0"})
	}
	m["cni.dev/valid-attachments"] = atts
	b, _ := json.Marshal(m)
	return b
}

// role is what the runtime says about an owner.
type role int

const (
	roleReady    role = iota // CRI lists it READY with its address: live
	roleNotReady             // CRI lists it NOTREADY with its address: the runtime's to release
	roleDead                 // absent from CRI and its netns is gone: a proven leak
	roleInFlight             // ADD returned, CRI does not list it yet, netns present: live
	roleDeleted              // its DEL exited 0
)

func (r role) String() string {
	return [...]string{"ready", "notready", "dead", "in-flight", "deleted"}[r]
}

func (r role) live() bool { return r == roleReady || r == roleNotReady || r == roleInFlight }

// owner is one sandbox the test handed an address to.
type owner struct {
	ID   string
	IP   netip.Addr
	Role role
	// Intact is false once the test damaged its record or its index entries
	// in a way after which its own DEL need not find the record.
	Intact bool
}

// golden is a store written by real plugin processes, and the model of who
// holds what in it. Each damage case works on a copy.
type golden struct {
	seed     int64
	path     string
	netnsDir string // where the records' netns paths point
	owners   []*owner
	// last is the owner of the last committed transaction.
	last *owner
}

// newID makes a 64-hex-digit sandbox ID, as containerd's.
func newID(rng *rand.Rand) string {
	b := make([]byte, 32)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return hex.EncodeToString(b)
}

// buildGolden writes the golden store for seed: 48 ADDs, 8 DELs (holes and
// audit entries), 4 more ADDs; 44 records spread over several allocs leaves.
// Roles: the last ADD's owner and most others READY, a few NOTREADY, a few dead.
func buildGolden(t *testing.T, seed int64) *golden {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	dir := t.TempDir()
	conf := netConf(dir)
	g := &golden{seed: seed, path: filepath.Join(dir, network+".db"), netnsDir: t.TempDir()}
	netns := func(id string) string { return filepath.Join(g.netnsDir, "cni-"+id[:12]) }
	add := func() *owner {
		id := newID(rng)
		// The runtime creates the sandbox's netns before ADD (the plugin
		// records that it existed; newNode empties and refills the dir).
		if err := os.WriteFile(netns(id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		o := runPlugin(invocation{Command: "ADD", ContainerID: id, Netns: netns(id), Conf: conf})
		if !o.OK() {
			t.Fatalf("golden store: ADD %s: %v", id, o)
		}
		ip, err := resultIP(o.Stdout)
		if err != nil {
			t.Fatalf("golden store: ADD %s: %v", id, err)
		}
		return &owner{ID: id, IP: ip, Intact: true}
	}
	for range 48 {
		g.owners = append(g.owners, add())
	}
	rng.Shuffle(len(g.owners), func(i, j int) { g.owners[i], g.owners[j] = g.owners[j], g.owners[i] })
	for _, o := range g.owners[:8] {
		if out := runPlugin(invocation{Command: "DEL", ContainerID: o.ID, Netns: netns(o.ID), Conf: conf}); !out.OK() {
			t.Fatalf("golden store: DEL %s: %v", o.ID, out)
		}
	}
	g.owners = slices.Clone(g.owners[8:])
	for range 4 {
		g.owners = append(g.owners, add())
	}
	g.last = g.owners[len(g.owners)-1]
	for i, o := range g.owners {
		switch {
		case o == g.last:
			o.Role = roleReady
		case i%11 == 3:
			o.Role = roleNotReady
		case i%11 == 7:
			o.Role = roleDead
		default:
			o.Role = roleReady
		}
	}
	return g
}

// model is one case's view of who holds what.
type model struct {
	mu     sync.Mutex
	owners map[string]*owner
	// quarantined are addresses whose record does not decode: reserved until
	// an operator releases them.
	quarantined map[netip.Addr]bool
}

func (g *golden) model() *model {
	m := &model{owners: map[string]*owner{}, quarantined: map[netip.Addr]bool{}}
	for _, o := range g.owners {
		c := *o
		m.owners[o.ID] = &c
	}
	return m
}

// held are the addresses no ADD may return: every live owner's and every
// quarantined record's.
func (m *model) held() map[netip.Addr]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := map[netip.Addr]string{}
	for _, o := range m.owners {
		if o.Role.live() {
			h[o.IP] = fmt.Sprintf("%s owner %s", o.Role, o.ID[:12])
		}
	}
	for ip := range m.quarantined {
		h[ip] = "a quarantined (damaged) record"
	}
	return h
}

func (m *model) byRole(r role) []*owner {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*owner
	for _, o := range m.owners {
		if o.Role == r {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *owner) int { return a.IP.Compare(b.IP) })
	return out
}

func (m *model) ownerOf(ip netip.Addr) *owner {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.owners {
		if o.IP == ip && o.Role != roleDeleted {
			return o
		}
	}
	return nil
}

// node is one case's node: a data dir with a copy of the golden store, a
// netns dir, and the runtime.
type node struct {
	t        *testing.T
	dataDir  string
	netnsDir string
	cri      *fakecri.Server
	conf     []byte
	m        *model
}

func (n *node) path() string { return filepath.Join(n.dataDir, network+".db") }

func (n *node) netns(id string) string { return filepath.Join(n.netnsDir, "cni-"+id[:12]) }

// newNode copies the golden store into a fresh data dir and sets up the
// runtime and the netns dir to match the model. The records name their netns
// in the golden store's netns dir, so cases of one seed run one at a time and
// each starts by emptying and refilling that dir.
func newNode(t *testing.T, g *golden) *node {
	t.Helper()
	n := &node{t: t, dataDir: t.TempDir(), netnsDir: g.netnsDir, cri: startCRI(t), m: g.model()}
	n.conf = netConf(n.dataDir)
	if err := copyFile(g.path, n.path()); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(n.netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(n.netnsDir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range n.m.owners {
		switch o.Role {
		case roleReady:
			n.cri.Ready(o.ID, o.IP)
		case roleNotReady:
			n.cri.Put(fakecri.Sandbox{ID: o.ID, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, IPs: []netip.Addr{o.IP}})
		}
		if o.Role != roleDead {
			if err := os.WriteFile(n.netns(o.ID), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return n
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

func resultIP(stdout []byte) (netip.Addr, error) { return cniexec.ResultIP(stdout) }

func inPool(ip netip.Addr) bool { return ip.Compare(rangeStart) >= 0 && ip.Compare(rangeEnd) <= 0 }
