// Package k8s runs a real single-node Kubernetes (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet on the project's containerd)
// for the end-to-end tests of hostlease's DaemonSet (deploy/) and of the
// plugin and daemon driven by kubelet's own sandbox retry loop.
//
// What a Cluster changes on the machine, and how Stop undoes it:
//   - everything it writes lives under Root (a fixed path, so that
//     e2e/k8s/overlay can name its hostPaths); one default node at a time
//     (one run of the suite at a time: hack/e2e-k8s.sh), and beside it any
//     number of Instance nodes, each in a network namespace of its own (see
//     Instance); a Root left by a killed run is torn down by the next Start
//     of the same instance;
//   - links: NodeBridge (an empty bridge holding the node IP as a /32) and the
//     pod bridges named in conflists it wrote (CNIConfDir and every
//     RuntimeConfDir); deleted;
//   - containerd's config has RuntimeHandlers besides its default runtime,
//     each with a CNI conf dir of its own under Root;
//   - processes: etcd, the control plane, containerd and kubelet are its
//     children, killed by PID; shims and containers by their socket / runc root;
//   - containerd and kubelet run in one private mount namespace (held by a
//     `sleep` child): `/` is made rshared there only (mount propagation for
//     volumes), and the /proc/sys files kubelet rewrites are bind-mounted over
//     by files holding the values it wants, so no host sysctl changes; every
//     mount made there dies with the namespace;
//   - cgroups: CgroupRoot in every hierarchy; removed recursively;
//   - host dirs kubelet creates whatever its flags say (/var/lib/kubelet,
//     /var/log/containers), shared by every instance's kubelet: removed by
//     the last instance to stop when one of them created them (hostdirs.go);
//   - libcni's result cache entries of its networks; removed.
package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hostlease/hostlease/e2e/harness"
)

// Fixed addresses and names of the cluster (distinct from e2e/'s 10.99.x,
// bridges and sockets). deploy/overlays/e2e-k8s repeats the paths and ports.
const (
	NodeName      = "hostlease-e2e-node"
	NodeIP        = "10.250.0.1"
	NodeBridge    = "hlk8s-node"
	APIPort       = 16443
	EtcdPort      = 12379
	EtcdPeerPort  = 12380
	KubeletPort   = 10250 // bound to NodeIP only
	MetricsPort   = 19734 // the daemon's metrics, on NodeIP (overlay)
	ServiceCIDR   = "10.96.0.0/24"
	SysNamespace  = "hostlease-system"
	DaemonSetName = "hostlease-gc"
	// Image is the name of the image built from make build's binaries.
	Image = "localhost/hostlease/hostlease:e2e"
)

// ContainerdMetricsPort serves the node's containerd's Prometheus metrics
// (/v1/metrics) on loopback.
const ContainerdMetricsPort = 19735

// Instance names a node of its own beside the default one
// ($HOSTLEASE_K8S_INSTANCE, 1-8 of [a-z0-9]; empty: the default node). An
// instance has its own Root and CgroupRoot and must run in a network
// namespace of its own (Start refuses otherwise): there its ports, links and
// addresses are the default node's, with nothing shared. It never installs
// the DaemonSet (the overlay and Helm values name the default Root), so it
// runs only tests that need no DaemonSet (hack/e2e-k8s.sh runs
// TestRetriesHealWithoutDaemon on instance "heal" beside the others).
var Instance = os.Getenv("HOSTLEASE_K8S_INSTANCE")

// The instance's own paths: Root holds everything it writes, CgroupRoot its
// cgroups.
var (
	Root       = instancePath(defaultRoot)
	CgroupRoot = instancePath("/hostlease-k8s")
)

// instancePath is base for the default node, base-<Instance> for another.
func instancePath(base string) string {
	if Instance == "" {
		return base
	}
	return base + "-" + Instance
}

// checkInstance refuses an Instance name that is not 1-8 of [a-z0-9], and
// an Instance node in a network namespace with links other than loopback
// and the suite's own (hlk8s-*): the host's, where its ports and links
// would be the default node's. (The host's namespace cannot be compared
// directly: /proc/1/ns is not readable here.)
func checkInstance() error {
	if Instance == "" {
		return nil
	}
	if len(Instance) > 8 || strings.Trim(Instance, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return fmt.Errorf("HOSTLEASE_K8S_INSTANCE=%q: want 1-8 of [a-z0-9]", Instance)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && !strings.HasPrefix(i.Name, "hlk8s-") {
			return fmt.Errorf("HOSTLEASE_K8S_INSTANCE=%s: an instance node needs a network namespace of its own "+
				"(its ports and links are the default node's), and this one has link %s; run it under `unshare --net` "+
				"as hack/e2e-k8s.sh does", Instance, i.Name)
		}
	}
	return nil
}

// RuntimeHandlers are the node's extra CRI runtime handlers: runc like the
// default one, each with a CNI config dir of its own (RuntimeConfDir), so a
// pod of the RuntimeClass of that name gets only that dir's network. Tests
// run several pod networks side by side with them, without touching the
// node's own conflist. The dirs exist from the start (containerd watches
// them); what a test writes there is torn down like CNIConfDir's conflists.
var RuntimeHandlers = []string{"hlk8s-hs-pair", "hlk8s-hl-pair", "hlk8s-hs-storm", "hlk8s-hl-storm",
	"hlk8s-ps-hl", "hlk8s-ps-hs", "hlk8s-ps-hsi"}

// RuntimeConfDir is the CNI config dir of runtime handler h.
func RuntimeConfDir(h string) string { return filepath.Join(Root, "cni-conf-"+h) }

// Paths under Root.
var (
	CNIBinDir  = filepath.Join(Root, "cni-bin")
	CNIConfDir = filepath.Join(Root, "cni-conf")
	CNIDataDir = filepath.Join(Root, "cni-data") // the plugin's dataDir = the DaemonSet's data-dir hostPath
	RunDir     = filepath.Join(Root, "run")      // holds containerd.sock; the DaemonSet's cri-socket-dir
	Socket     = filepath.Join(RunDir, "containerd.sock")
	StateDir   = filepath.Join(Root, "state")
	NetnsDir   = filepath.Join(StateDir, "io.containerd.grpc.v1.cri", "netns")
	RuncRoot   = filepath.Join(Root, "runc")
	LogDir     = filepath.Join(Root, "logs")
	AuditLog   = filepath.Join(LogDir, "audit.log")
	PodLogsDir = filepath.Join(Root, "pod-logs")
)

// kubeletSysctls are the /proc/sys files kubelet sets at start (its
// setupKernelTunables) with the values it wants; bind-mounted over in the
// node's mount namespace.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// Bins are the cached Kubernetes binaries (hack/k8s-setup.sh).
type Bins struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kubelet, Kubectl string
}

// K8sCacheDir is ${HOSTLEASE_K8S_CACHE:-/var/cache/hostlease-k8s}.
func K8sCacheDir() string {
	if d := os.Getenv("HOSTLEASE_K8S_CACHE"); d != "" {
		return d
	}
	return "/var/cache/hostlease-k8s"
}

// EnsureBins runs hack/k8s-setup.sh (cheap when cached; builds ~7 min cold)
// and returns the binaries.
func EnsureBins() (Bins, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return Bins{}, err
	}
	if os.Getenv("HOSTLEASE_E2E_SKIP_SETUP") == "" {
		cmd := exec.Command("bash", filepath.Join(root, "hack", "k8s-setup.sh"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return Bins{}, fmt.Errorf("hack/k8s-setup.sh: %w", err)
		}
	}
	c := K8sCacheDir()
	b := Bins{
		Etcd: filepath.Join(c, "bin", "etcd"), APIServer: filepath.Join(c, "bin", "kube-apiserver"),
		ControllerManager: filepath.Join(c, "bin", "kube-controller-manager"), Scheduler: filepath.Join(c, "bin", "kube-scheduler"),
		Kubelet: filepath.Join(c, "bin", "kubelet"), Kubectl: filepath.Join(c, "bin", "kubectl"),
	}
	for _, p := range []string{b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler, b.Kubelet, b.Kubectl} {
		if _, err := os.Stat(p); err != nil {
			return Bins{}, fmt.Errorf("k8s artifact missing (run hack/k8s-setup.sh as root): %w", err)
		}
	}
	return b, nil
}

// Cluster is one running control plane + node.
type Cluster struct {
	Bins       Bins
	Art        harness.Artifacts
	Kubeconfig string // admin (system:masters)
	pki        *pki
	procs      map[string]*proc
	holder     *proc // owns the node's mount namespace
	logf       func(string, ...any)
	bridges    []string
	networks   []string
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start brings the cluster up: control plane, then the node (containerd +
// kubelet), and waits until the Node is registered.
func Start(logf func(string, ...any)) (c *Cluster, err error) {
	// containerd, CNI plugins and the pause image come from hack/e2e-setup.sh,
	// in a cache of this suite's own unless HOSTLEASE_CACHE says otherwise:
	// another run rebuilding the shared one must not pull binaries from under
	// a running node.
	if err := checkInstance(); err != nil {
		return nil, err
	}
	if os.Getenv("HOSTLEASE_CACHE") == "" {
		os.Setenv("HOSTLEASE_CACHE", filepath.Join(K8sCacheDir(), "e2e"))
	}
	bins, err := EnsureBins()
	if err != nil {
		return nil, err
	}
	art, err := harness.EnsureArtifacts()
	if err != nil {
		return nil, err
	}
	c = &Cluster{Bins: bins, Art: art, procs: map[string]*proc{}, logf: logf}
	reapStale(logf)
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	for _, d := range []string{Root, CNIBinDir, CNIConfDir, CNIDataDir, RunDir, StateDir, RuncRoot, LogDir, PodLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, err
		}
	}
	for _, h := range RuntimeHandlers {
		if err := os.MkdirAll(RuntimeConfDir(h), 0o755); err != nil {
			return c, err
		}
	}
	if err := os.WriteFile(filepath.Join(Root, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return c, err
	}
	// After owner.pid: from here on an instance that stops sees this one live.
	if err := recordHostDirs(); err != nil {
		return c, err
	}
	t0 := time.Now()
	if err := c.setupPKI(); err != nil {
		return c, fmt.Errorf("pki: %w", err)
	}
	if err := c.startControlPlane(); err != nil {
		return c, err
	}
	logf("control plane up in %v", time.Since(t0).Round(time.Millisecond))
	if err := c.startNode(); err != nil {
		return c, err
	}
	logf("node %s registered in %v", NodeName, time.Since(t0).Round(time.Millisecond))
	return c, nil
}

func (c *Cluster) setupPKI() error {
	p, err := newPKI(filepath.Join(Root, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	lo := net.ParseIP("127.0.0.1")
	steps := []error{
		p.issue("apiserver", "kube-apiserver", nil, true,
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			[]net.IP{lo, net.ParseIP("10.96.0.1"), net.ParseIP(NodeIP)}),
		p.issue("admin", "kubernetes-admin", []string{"system:masters"}, false, nil, nil),
		p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false, nil, nil),
		p.issue("controller-manager", "system:kube-controller-manager", nil, false, nil, nil),
		p.issue("scheduler", "system:kube-scheduler", nil, false, nil, nil),
		p.issue("node", "system:node:"+NodeName, []string{"system:nodes"}, false, nil, nil),
		p.issue("kubelet-serving", NodeName, nil, true, []string{NodeName}, []net.IP{net.ParseIP(NodeIP)}),
		p.serviceAccountKeys(),
	}
	for _, e := range steps {
		if e != nil {
			return e
		}
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", APIPort)
	for _, n := range []string{"admin", "controller-manager", "scheduler", "node"} {
		kc, err := p.kubeconfig(n, server)
		if err != nil {
			return err
		}
		if n == "admin" {
			c.Kubeconfig = kc
		}
	}
	return nil
}

// start launches a child process logging to LogDir/<name>.log.
func (c *Cluster) start(name string, argv []string, env []string) (*proc, error) {
	lf, err := os.OpenFile(filepath.Join(LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "==== e2e/k8s: starting %s at %s: %s\n", name, time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	_ = os.WriteFile(filepath.Join(Root, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	c.procs[name] = p
	return p, nil
}

// stopProc sends SIGTERM to one child (SIGKILL after grace) and waits.
func (c *Cluster) stopProc(name string, grace time.Duration) {
	p := c.procs[name]
	if p == nil {
		return
	}
	delete(c.procs, name)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Running reports whether the named child is alive.
func (c *Cluster) Running(name string) bool {
	p := c.procs[name]
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (c *Cluster) startControlPlane() error {
	pk := c.pki.path
	if err := checkPortsFree(EtcdPort, EtcdPeerPort, APIPort); err != nil {
		return err
	}
	if _, err := c.start("etcd", []string{c.Bins.Etcd, "--name=e2e", "--data-dir=" + filepath.Join(Root, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", EtcdPort),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", EtcdPort),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", EtcdPeerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", EtcdPeerPort),
		fmt.Sprintf("--initial-cluster=e2e=http://127.0.0.1:%d", EtcdPeerPort),
		"--unsafe-no-fsync", "--log-level=warn"}, nil); err != nil {
		return err
	}
	policy := filepath.Join(Root, "audit-policy.yaml")
	// Every request of the daemon's ServiceAccount, nothing else: the test
	// counts them.
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:hostlease-system:hostlease-gc"]
- level: None
`), 0o644); err != nil {
		return err
	}
	if err := c.ensureBridge(NodeBridge, NodeIP+"/32"); err != nil {
		return err
	}
	if _, err := c.start("kube-apiserver", []string{c.Bins.APIServer,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", EtcdPort),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", APIPort), "--advertise-address=" + NodeIP,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--kubelet-preferred-address-types=InternalIP",
		"--client-ca-file=" + pk("ca.crt"),
		"--tls-cert-file=" + pk("apiserver.crt"), "--tls-private-key-file=" + pk("apiserver.key"),
		"--kubelet-client-certificate=" + pk("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + pk("apiserver-kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + pk("sa.pub"),
		"--service-account-signing-key-file=" + pk("sa.key"),
		"--allow-privileged=true",
		"--audit-policy-file=" + policy, "--audit-log-path=" + AuditLog, "--audit-log-format=json",
		"--audit-log-maxsize=200",
		"--profiling=false", "--v=1"}, nil); err != nil {
		return err
	}
	if err := c.waitFor("apiserver /readyz", bringUpTimeout, func() error {
		return c.read(func(ctx context.Context, cs kubernetes.Interface) error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		})
	}); err != nil {
		return err
	}
	if _, err := c.start("kube-controller-manager", []string{c.Bins.ControllerManager,
		"--kubeconfig=" + pk("controller-manager.kubeconfig"), "--secure-port=0", "--leader-elect=false",
		"--use-service-account-credentials", "--service-account-private-key-file=" + pk("sa.key"),
		"--root-ca-file=" + pk("ca.crt"), "--service-cluster-ip-range=" + ServiceCIDR,
		"--node-monitor-grace-period=20s", "--v=1"}, nil); err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", []string{c.Bins.Scheduler,
		"--kubeconfig=" + pk("scheduler.kubeconfig"), "--secure-port=0", "--leader-elect=false", "--v=1"}, nil); err != nil {
		return err
	}
	// Pods are refused until the namespace's default ServiceAccount exists.
	return c.waitFor("default ServiceAccount", bringUpTimeout, func() error {
		return c.read(func(ctx context.Context, cs kubernetes.Interface) error {
			_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err
		})
	})
}

func checkPortsFree(ports ...int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return fmt.Errorf("port 127.0.0.1:%d is taken (another e2e/k8s run on this machine?): %w", p, err)
		}
		l.Close()
	}
	return nil
}

// ensureBridge creates an empty bridge with addr (remembered for teardown).
func (c *Cluster) ensureBridge(name, addr string) error {
	c.bridges = append(c.bridges, name)
	if exec.Command("ip", "link", "show", "dev", name).Run() != nil {
		if out, err := exec.Command("ip", "link", "add", name, "type", "bridge").CombinedOutput(); err != nil {
			return fmt.Errorf("ip link add %s: %v: %s", name, err, out)
		}
	}
	if out, err := exec.Command("ip", "addr", "replace", addr, "dev", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr replace %s dev %s: %v: %s", addr, name, err, out)
	}
	if out, err := exec.Command("ip", "link", "set", name, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set %s up: %v: %s", name, err, out)
	}
	return nil
}

// bringUpTimeout bounds the wait for a component of the node to come up
// (the apiserver's post-start hooks, the default ServiceAccount, the Node
// object, containerd's socket). It judges the machine, not hostlease: a
// component that exits fails the wait at once (waitFor watches every process
// it started), so the bound only has to outlast a loaded machine's start
// (docs/testing.md: the apiserver's bootstrap hooks on a loaded machine).
const bringUpTimeout = 5 * time.Minute

func (c *Cluster) waitFor(what string, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return nil
		}
		for name, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited (%v) while waiting for %s; see %s", name, p.err, what, filepath.Join(LogDir, name+".log"))
			default:
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %v waiting for %s: %v", timeout, what, err)
}

// Kubectl runs kubectl as the admin and returns stdout (stderr in the error).
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlIn(nil, args...)
}

// KubectlIn is Kubectl with stdin.
func (c *Cluster) KubectlIn(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bins.Kubectl, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ---------------------------------------------------------------- the node

func (c *Cluster) startNode() error {
	if err := c.startNamespace(); err != nil {
		return err
	}
	if err := c.makeCgroupRoot(); err != nil {
		return err
	}
	for _, name := range []string{"bridge", "loopback", "host-local"} {
		if err := harness.CopyExecutable(filepath.Join(c.Art.CNIBinDir, name), filepath.Join(CNIBinDir, name)); err != nil {
			return err
		}
	}
	if err := harness.BuildGoBinary(harness.ModulePath+"/e2e/failplugin", filepath.Join(CNIBinDir, "failplugin")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(Root, "containerd.toml"), []byte(containerdConfig(c.Art)), 0o644); err != nil {
		return err
	}
	if err := c.StartContainerd(); err != nil {
		return err
	}
	if out, err := c.Ctr("images", "import", c.Art.PauseTar); err != nil {
		return fmt.Errorf("import pause: %v: %s", err, out)
	}
	if err := c.writeKubeletConfig(); err != nil {
		return err
	}
	if err := c.StartKubelet(); err != nil {
		return err
	}
	return c.waitFor("Node "+NodeName+" registered", bringUpTimeout, func() error {
		_, err := c.node()
		return err
	})
}

// startNamespace starts the holder of the node's private mount namespace.
func (c *Cluster) startNamespace() error {
	sys := filepath.Join(Root, "sysctl")
	if err := os.MkdirAll(sys, 0o755); err != nil {
		return err
	}
	var script strings.Builder
	script.WriteString("set -e\nmount --make-rshared /\n")
	for key, val := range kubeletSysctls {
		f := filepath.Join(sys, strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(val+"\n"), 0o644); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join("/proc/sys", key)); err != nil {
			continue
		}
		fmt.Fprintf(&script, "mount --bind %s /proc/sys/%s\n", f, key)
	}
	ready := filepath.Join(Root, "ns.ready")
	fmt.Fprintf(&script, "touch %s\nexec sleep infinity\n", ready)
	p, err := c.start("mntns", []string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script.String()}, nil)
	if err != nil {
		return err
	}
	c.holder = p
	delete(c.procs, "mntns") // stopped last, by Stop
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(LogDir, "mntns.log"))
			return fmt.Errorf("mount namespace holder exited: %v\n%s", p.err, b)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("mount namespace holder not ready after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inNS prefixes argv so it runs in the node's mount namespace.
func (c *Cluster) inNS(argv ...string) []string {
	return append([]string{"nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", c.holder.cmd.Process.Pid), "--"}, argv...)
}

// makeCgroupRoot creates CgroupRoot in every v1 hierarchy (kubelet requires
// its parent to exist in each), with cpuset's cpus/mems copied from the root.
func (c *Cluster) makeCgroupRoot() error {
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		d := filepath.Join("/sys/fs/cgroup", e.Name(), CgroupRoot)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if strings.Contains(e.Name(), "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", e.Name(), f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// containerdConfig is the harness's containerd config with the node's paths
// (containerd and kubelet share them in the node's mount namespace), plus
// RuntimeHandlers and its metrics on ContainerdMetricsPort.
func containerdConfig(a harness.Artifacts) string {
	cfg := harness.ContainerdConfig(a.Version, harness.ContainerdPaths{
		Root: filepath.Join(Root, "containerd-root"), State: StateDir, Temp: filepath.Join(Root, "tmp"),
		Socket: Socket, CNIBinDir: CNIBinDir, CNIConfDir: CNIConfDir, Runc: a.Runc, RuncRoot: RuncRoot,
	})
	// The runtimes table: version 3 (2.x) splits the CRI plugin, version 2
	// (1.7) has one.
	table := "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes"
	if a.Version.Major < 2 {
		table = "plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes"
	}
	var b strings.Builder
	b.WriteString(cfg)
	for _, h := range RuntimeHandlers {
		fmt.Fprintf(&b, `
  [%[1]s.'%[2]s']
    runtime_type = 'io.containerd.runc.v2'
    cni_conf_dir = '%[3]s'
    cni_max_conf_num = 1
    [%[1]s.'%[2]s'.options]
      SystemdCgroup = false
      BinaryName = '%[4]s'
      Root = '%[5]s'
`, table, h, RuntimeConfDir(h), a.Runc, RuncRoot)
	}
	fmt.Fprintf(&b, "\n[metrics]\n  address = '127.0.0.1:%d'\n", ContainerdMetricsPort)
	return b.String()
}

// StartContainerd starts containerd in the node's namespace and waits for
// its socket.
func (c *Cluster) StartContainerd() error {
	path := "PATH=" + filepath.Dir(c.Art.Shim) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if _, err := c.start("containerd", c.inNS(c.Art.Containerd, "--config", filepath.Join(Root, "containerd.toml")), []string{path}); err != nil {
		return err
	}
	return c.waitFor("containerd", bringUpTimeout, func() error {
		_, err := c.Ctr("version")
		return err
	})
}

// StopContainerd stops containerd (shims and containers keep running).
func (c *Cluster) StopContainerd() { c.stopProc("containerd", 15*time.Second) }

// Ctr runs ctr against the node's containerd in namespace k8s.io.
func (c *Cluster) Ctr(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, c.Art.Ctr, append([]string{"-a", Socket, "-n", "k8s.io"}, args...)...).CombinedOutput()
}

func (c *Cluster) writeKubeletConfig() error {
	pk := c.pki.path
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
resolvConf: ""
staticPodPath: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "50Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
maxPods: 150
`, NodeIP, KubeletPort, pk("kubelet-serving.crt"), pk("kubelet-serving.key"), pk("ca.crt"),
		CgroupRoot, Socket, PodLogsDir)
	return os.WriteFile(filepath.Join(Root, "kubelet.yaml"), []byte(cfg), 0o644)
}

// StartKubelet starts kubelet in the node's namespace.
func (c *Cluster) StartKubelet() error {
	_, err := c.start("kubelet", c.inNS(c.Bins.Kubelet, "--config="+filepath.Join(Root, "kubelet.yaml"),
		"--kubeconfig="+c.pki.path("node.kubeconfig"), "--root-dir="+filepath.Join(Root, "kubelet"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=2"), nil)
	return err
}

// StopKubelet stops kubelet.
func (c *Cluster) StopKubelet() { c.stopProc("kubelet", 15*time.Second) }

// WriteConflist writes a CNI conflist atomically (dot-file + rename); the
// bridges and network it names are removed on teardown.
func (c *Cluster) WriteConflist(name string, conf []byte) error {
	return c.WriteConflistIn(CNIConfDir, name, conf)
}

// WriteConflistIn is WriteConflist into dir (CNIConfDir or a RuntimeConfDir).
func (c *Cluster) WriteConflistIn(dir, name string, conf []byte) error {
	network, bridges := harness.ConflistNetwork(conf)
	c.bridges = append(c.bridges, bridges...)
	if network != "" {
		c.networks = append(c.networks, network)
	}
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, conf, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// Stop tears everything down (see the package doc); best effort, logs what
// it could not undo.
func (c *Cluster) Stop() {
	c.StopKubelet()
	if c.Running("containerd") {
		c.removeAllSandboxes()
	}
	c.StopContainerd()
	for _, n := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		c.stopProc(n, 10*time.Second)
	}
	for n := range c.procs {
		c.stopProc(n, 5*time.Second)
	}
	if c.holder != nil {
		_ = c.holder.cmd.Process.Kill()
		<-c.holder.done
	}
	teardownRoot(c.bridges, c.networks, c.logf)
}

// removeAllSandboxes stops and removes every sandbox (CNI DELs run) with
// failplugin triggers gone so the DELs succeed.
func (c *Cluster) removeAllSandboxes() {
	trig, _ := filepath.Glob(filepath.Join(Root, "trigger-*"))
	for _, f := range trig {
		_ = os.Remove(f)
	}
	ids, err := c.sandboxIDs()
	if err != nil {
		c.logf("list sandboxes: %v", err)
		return
	}
	for _, id := range ids {
		if err := c.stopRemoveSandbox(id); err != nil {
			c.logf("remove sandbox %s: %v", id, err)
		}
	}
}

// teardownRoot removes what a cluster rooted at Root left, once its
// processes are gone.
func teardownRoot(bridges, networks []string, logf func(string, ...any)) {
	all := append([]string{NodeBridge}, bridges...)
	harness.TeardownDir(Root, Socket, RuncRoot, CgroupRoot, all, networks, logf)
	// kubelet links every container log into /var/log/containers, whatever
	// podLogsDir says: remove the links into ours.
	links, _ := filepath.Glob("/var/log/containers/*")
	for _, l := range links {
		if dst, err := os.Readlink(l); err == nil && strings.HasPrefix(dst, PodLogsDir+"/") {
			_ = os.Remove(l)
		}
	}
	removeHostDirs(logf)
}

// reapStale tears down a Root left by a killed run (its owner is gone).
func reapStale(logf func(string, ...any)) {
	b, err := os.ReadFile(filepath.Join(Root, "owner.pid"))
	if err != nil {
		if _, serr := os.Stat(Root); serr != nil {
			return
		}
	} else if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, 0) == nil && pid != os.Getpid() {
		logf("%s belongs to live process %d; not reaping", Root, pid)
		return
	}
	logf("reaping stale %s", Root)
	for _, n := range []string{"kubelet", "containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "mntns"} {
		pb, err := os.ReadFile(filepath.Join(Root, n+".pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(pb)))
		if err != nil || pid <= 1 {
			continue
		}
		if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cl, []byte(Root)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	time.Sleep(500 * time.Millisecond)
	var bridges, networks []string
	confs, _ := filepath.Glob(filepath.Join(CNIConfDir, "*"))
	for _, h := range RuntimeHandlers {
		more, _ := filepath.Glob(filepath.Join(RuntimeConfDir(h), "*"))
		confs = append(confs, more...)
	}
	for _, f := range confs {
		if b, err := os.ReadFile(f); err == nil {
			network, brs := harness.ConflistNetwork(b)
			bridges = append(bridges, brs...)
			networks = append(networks, network)
		}
	}
	teardownRoot(bridges, networks, logf)
}

// Reboot does to the node what a power cycle does: kubelet and containerd
// stop, every container and shim dies, the mount namespace (and with it every
// netns and rootfs mount) goes, the runtime's state dir (tmpfs on a real
// node) and the pod cgroups are wiped; then the namespace, containerd and
// kubelet start again. Images (containerd's root), kubelet's root dir, the
// CNI config and the plugin's stores survive, as on disk.
func (c *Cluster) Reboot() error {
	c.StopKubelet()
	c.StopContainerd()
	harness.KillContainers(StateDir, Socket, RuncRoot, c.logf)
	if c.holder != nil {
		_ = c.holder.cmd.Process.Kill()
		<-c.holder.done
		c.holder = nil
	}
	for _, p := range []string{StateDir, filepath.Join(Root, "ns.ready")} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	harness.RemoveCgroup(CgroupRoot)
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return err
	}
	if err := c.startNamespace(); err != nil {
		return err
	}
	if err := c.makeCgroupRoot(); err != nil {
		return err
	}
	if err := c.StartContainerd(); err != nil {
		return err
	}
	return c.StartKubelet()
}
