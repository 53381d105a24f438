package bench

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	hl "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// kind is what a plugin under test is, which decides how its pools are
// filled and checked and where it appears in the report.
type kind int

const (
	kindStaticFloor      kind = iota // reads stdin, prints a fixed result: no CNI library
	kindSkelFloor                    // the same through skel and the CNI types
	kindDurableFloor                 // the static floor plus flock and two fdatasync'ed 4 KiB pages
	kindSkelDurableFloor             // the skel floor plus the durable floor's writes
	kindSkelBboltFloor               // the skel floor plus one bbolt transaction per call
	kindHostLocal                    // host-local, the plugin hostlease replaces
	kindHostlease                    // hostlease (also a baseline build of it: -bench.before)
)

// plugin is one binary under test.
type plugin struct {
	name string // "static-floor", "skel-floor", "durable-floor", "durable-floor-1p", "skel-durable-floor", "skel-bbolt-floor", "skel-bbolt-floor-1p", "host-local", "hostlease", "hostlease-<variant>", "hostlease-before"
	kind kind
	path string
	size int64
}

// pluginSources are the plugins every run builds, in report order, and the
// package each is built from.
var pluginSources = []struct {
	name string
	kind kind
	pkg  string
	tags string // build tags
}{
	{"static-floor", kindStaticFloor, "./test/bench/staticfloor", ""},
	{"skel-floor", kindSkelFloor, "./test/bench/skelfloor", ""},
	{"durable-floor", kindDurableFloor, "./test/bench/durablefloor", ""},
	{"durable-floor-1p", kindDurableFloor, "./test/bench/durablefloor", "onep"},   // on one P as hostlease; the ratios' base is the first durable floor
	{"skel-durable-floor", kindSkelDurableFloor, "./test/bench/skelfloor", ""},    // the skel floor's binary: its name selects the durable writes
	{"skel-bbolt-floor", kindSkelBboltFloor, "./test/bench/skelfloor", ""},        // its name selects one bbolt transaction per call
	{"skel-bbolt-floor-1p", kindSkelBboltFloor, "./test/bench/skelfloor", "onep"}, // the same on one P as hostlease
	{"host-local", kindHostLocal, "github.com/containernetworking/plugins/plugins/ipam/host-local", ""},
	{"hostlease", kindHostlease, "./cmd/ipam", ""},
}

// buildPlugins builds every plugin and installs it into binDir; with
// -bench.variants, builds of ./cmd/ipam with other build tags too, and with
// -bench.before, a prebuilt hostlease binary, as "hostlease-before"; each is
// a hostlease measured interleaved with the others (same-run A/B).
func buildPlugins(root, binDir string) ([]*plugin, error) {
	var plugins []*plugin
	built := filepath.Join(binDir, ".build")
	for _, src := range pluginSources {
		p := &plugin{name: src.name, kind: src.kind, path: filepath.Join(binDir, src.name)}
		out := filepath.Join(built, src.name)
		if err := build(root, src.pkg, out, src.tags); err != nil {
			return nil, err
		}
		if err := install(out, p.path); err != nil {
			return nil, err
		}
		plugins = append(plugins, p)
	}
	if *flagVariant != "" {
		for _, v := range strings.Split(*flagVariant, ",") {
			name, tags, ok := strings.Cut(v, ":")
			if !ok || name == "" {
				return nil, fmt.Errorf("-bench.variants: %q is not name:tags", v)
			}
			p := &plugin{name: "hostlease-" + name, kind: kindHostlease, path: filepath.Join(binDir, "hostlease-"+name)}
			out := filepath.Join(built, p.name)
			if err := build(root, "./cmd/ipam", out, strings.ReplaceAll(tags, "+", ",")); err != nil {
				return nil, err
			}
			if err := install(out, p.path); err != nil {
				return nil, err
			}
			plugins = append(plugins, p)
		}
	}
	if *flagBefore != "" {
		p := &plugin{name: "hostlease-before", kind: kindHostlease, path: filepath.Join(binDir, "hostlease-before")}
		if err := install(*flagBefore, p.path); err != nil {
			return nil, err
		}
		plugins = append(plugins, p)
	}
	for _, p := range plugins {
		if fi, err := os.Stat(p.path); err == nil {
			p.size = fi.Size()
		}
	}
	return plugins, nil
}

// install copies an executable into place with one write, as an installer
// does, so that every binary under test is in the page cache the same way.
// How a file was written decides the size of its page-cache folios, and an
// exec faults its text in folio by folio: the same hostlease binary costs
// ~13 page faults and ~0.27 ms of CPU more per call as the linker left it
// (many small writes) than copied in one write (measured interleaved, 120
// pairs). Comparing a binary fresh from the linker with a copied one would
// measure that, not the code.
func install(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// indexOf is the index of the first plugin of kind k (every run has one of
// each kind).
func indexOf(plugins []*plugin, k kind) int {
	for i, p := range plugins {
		if p.kind == k {
			return i
		}
	}
	panic(fmt.Sprintf("no plugin of kind %d", k))
}

func pluginsOf(nets []*network) []*plugin {
	out := make([]*plugin, len(nets))
	for i, n := range nets {
		out[i] = n.p
	}
	return out
}

func pluginNames(plugins []*plugin) string {
	names := make([]string, len(plugins))
	for i, p := range plugins {
		names[i] = p.name
	}
	return strings.Join(names, ", ")
}

// network is one plugin's instance of a benchmark network: its config (the
// same for every plugin but for the ipam type and dataDir) and state dir.
type network struct {
	p       *plugin
	name    string
	subnet  string
	dataDir string
	cniPath string
	conf    []byte
}

func newNetwork(p *plugin, name, subnet, dataDir, cniPath string) *network {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":"cni-bench","isGateway":true,`+
		`"ipam":{"type":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}`,
		name, p.name, subnet, dataDir)
	return &network{p: p, name: name, subnet: subnet, dataDir: dataDir, cniPath: cniPath, conf: []byte(conf)}
}

// containerID makes a sandbox-like ID (64 hex digits) from a readable name.
func containerID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// call execs the plugin once, as a runtime (libcni) does: config on stdin,
// CNI_* in a minimal environment, stdout collected. It returns the wall time
// from fork to exit and the plugin's stdout.
func (n *network) call(verb, name string) (time.Duration, []byte, error) {
	d, _, out, err := n.callCPU(verb, name)
	return d, out, err
}

// callCPU is call that also returns the CPU time (user+system) the plugin
// process used.
func (n *network) callCPU(verb, name string) (time.Duration, time.Duration, []byte, error) {
	id := containerID(name)
	cmd := exec.Command(n.p.path)
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CNI_COMMAND=" + verb,
		"CNI_CONTAINERID=" + id,
		"CNI_NETNS=/var/run/netns/cni-" + id[:16],
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + n.cniPath,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=" + name +
			";K8S_POD_INFRA_CONTAINER_ID=" + id + ";K8S_POD_UID=" + id[:8] + "-0000-4000-8000-" + id[8:20],
	}
	cmd.Stdin = bytes.NewReader(n.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return d, cpu, nil, fmt.Errorf("%s %s %s on %s: %v: %s%s", n.p.name, verb, name, n.name, err,
			strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
	}
	if verb == "ADD" && !bytes.Contains(stdout.Bytes(), []byte(`"ips"`)) {
		return d, cpu, nil, fmt.Errorf("%s ADD %s on %s: result without ips: %s", n.p.name, name, n.name, stdout.String())
	}
	return d, cpu, stdout.Bytes(), nil
}

// addedIP is the first address of an ADD result.
func addedIP(out []byte) (netip.Addr, error) {
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return netip.Addr{}, err
	}
	if len(res.IPs) == 0 {
		return netip.Addr{}, fmt.Errorf("no ips in %s", out)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	return p.Addr(), err
}

// allocatable lists the addresses host-local hands out for the network's
// config, in its order (rangeStart..rangeEnd without the gateway), using
// host-local's own config parser so the defaults are exactly its own.
func (n *network) allocatable() ([]netip.Addr, error) {
	conf, _, err := hl.LoadIPAMConfig(n.conf, "")
	if err != nil {
		return nil, err
	}
	r := conf.Ranges[0][0]
	start, _ := netip.AddrFromSlice(r.RangeStart)
	end, _ := netip.AddrFromSlice(r.RangeEnd)
	gw, _ := netip.AddrFromSlice(r.Gateway)
	start, end, gw = start.Unmap(), end.Unmap(), gw.Unmap()
	var out []netip.Addr
	for a := start; a.IsValid() && a.Compare(end) <= 0; a = a.Next() {
		if a != gw {
			out = append(out, a)
		}
	}
	return out, nil
}

// fillByADD reserves count addresses through the plugin's real ADD, exec'd
// with par processes at a time. It returns which fill container holds which
// address and the wall time of the whole fill.
func (n *network) fillByADD(count, par int) (map[netip.Addr]string, time.Duration, error) {
	held := make(map[netip.Addr]string, count)
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				name := fmt.Sprintf("fill-%06d", i)
				_, out, err := n.call("ADD", name)
				var ip netip.Addr
				if err == nil {
					ip, err = addedIP(out)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				held[ip] = name
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < count; i++ {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return held, time.Since(start), firstErr
}

// adoptStore copies from's store (after its fill, no process using it) in
// place of n's, and reports whether n's plugin works on it: an ADD and a DEL
// of a probe container succeed (as a warm-up pair would). If not, n's store
// is removed again.
func (n *network) adoptStore(from *network) (bool, error) {
	b, err := os.ReadFile(store.FilePath(from.dataDir, from.name))
	if err != nil {
		return false, err
	}
	path := store.FilePath(n.dataDir, n.name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return false, err
	}
	_, _, err = n.call("ADD", "adopt-probe")
	if err == nil {
		_, _, err = n.call("DEL", "adopt-probe")
	}
	if err != nil {
		progress("%s cannot use %s's store (%v): filling its own", n.p.name, from.p.name, err)
		return false, os.Remove(path)
	}
	return true, nil
}

// releaseByDEL frees the given fill containers through the plugin's real DEL.
func (n *network) releaseByDEL(names []string, par int) error {
	errs := make(chan error, len(names))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, _, err := n.call("DEL", name); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// hostLocalLineBreak and the names below are host-local's on-disk format
// (plugins/ipam/host-local/backend/disk): one file per reserved address, named
// after it, holding "containerID\r\nifname"; last_reserved_ip.<rangeset index>
// holding the round-robin point.
const (
	hostLocalLineBreak  = "\r\n"
	hostLocalLastPrefix = "last_reserved_ip."
)

// writeHostLocalState writes host-local's state for network into dataDir as
// host-local itself would have after reserving held (container names[i] on
// eth0 holding held[i]) with last as its last reservation in range set 0.
func writeHostLocalState(dataDir, network string, held []netip.Addr, names []string, last netip.Addr) error {
	dir := filepath.Join(dataDir, network)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, ip := range held {
		content := containerID(names[i]) + hostLocalLineBreak + "eth0"
		if err := os.WriteFile(filepath.Join(dir, ip.String()), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, hostLocalLastPrefix+"0"), []byte(last.String()), 0o600)
}

// holes picks free addresses evenly spread over the pool (as churn leaves
// them on a real node) so that held = ceil(fraction*len(pool)) stay reserved.
// It returns the indexes (into pool) of the free addresses.
func holes(poolSize int, fraction float64) []int {
	held := int(float64(poolSize)*fraction + 0.999999)
	free := poolSize - held
	out := make([]int, free)
	for j := range out {
		out[j] = int((float64(j) + 0.5) * float64(poolSize) / float64(free))
	}
	return out
}
