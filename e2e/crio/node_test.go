package crio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// crioVersion is the CRI-O hack/crio-setup.sh builds; the suite checks the
// binary says so.
const crioVersion = "1.36.3"

// hangGuard bounds every wait of the suite; a test that reaches it failed as hung.
const hangGuard = 90 * time.Second

// envPrefix starts every node's temp dir.
const envPrefix = "hostlease-crio-"

// crioCache is ${HOSTLEASE_CRIO_CACHE:-/var/cache/hostlease-crio}.
func crioCache() string {
	if d := os.Getenv("HOSTLEASE_CRIO_CACHE"); d != "" {
		return d
	}
	return "/var/cache/hostlease-crio"
}

// artifacts are what a node runs: CRI-O and pinns (hack/crio-setup.sh),
// conmon and runc (apt), skopeo (apt), the pause archive and the reference
// CNI plugins (hack/e2e-setup.sh), the project's binaries (make build).
type artifacts struct {
	crio, pinns, conmon, runc, skopeo string
	pauseTar, cniBin                  string
	hostlease, hostleaseGC            string
}

var (
	artOnce sync.Once
	artVal  artifacts
	artErr  error
)

// ensureArtifacts runs hack/crio-setup.sh once per process (a stamp check when
// cached; HOSTLEASE_E2E_SKIP_SETUP=1 skips it) and finds every artifact.
func ensureArtifacts() (artifacts, error) {
	artOnce.Do(func() {
		root, err := harness.RepoRoot()
		if err != nil {
			artErr = err
			return
		}
		if os.Getenv("HOSTLEASE_E2E_SKIP_SETUP") == "" {
			cmd := exec.Command("bash", filepath.Join(root, "hack", "crio-setup.sh"))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				artErr = fmt.Errorf("hack/crio-setup.sh: %w", err)
				return
			}
		}
		a := artifacts{
			crio:     filepath.Join(crioCache(), "bin", "crio"),
			pinns:    filepath.Join(crioCache(), "bin", "pinns"),
			pauseTar: filepath.Join(harness.CacheDir(), "pause.tar"),
			cniBin:   filepath.Join(harness.CacheDir(), "cni-bin"),
		}
		var missing []string
		for _, p := range []string{a.crio, a.pinns, a.pauseTar, filepath.Join(a.cniBin, "bridge"), filepath.Join(a.cniBin, "loopback")} {
			if _, err := os.Stat(p); err != nil {
				missing = append(missing, p)
			}
		}
		for _, x := range []struct {
			dst  *string
			name string
		}{{&a.conmon, "conmon"}, {&a.runc, "runc"}, {&a.skopeo, "skopeo"}} {
			if *x.dst, err = exec.LookPath(x.name); err != nil {
				missing = append(missing, x.name+" (on PATH)")
			}
		}
		if a.hostlease, err = harness.ProjectBin("hostlease"); err != nil {
			missing = append(missing, err.Error())
		}
		if a.hostleaseGC, err = harness.ProjectBin("hostlease-gc"); err != nil {
			missing = append(missing, err.Error())
		}
		if len(missing) > 0 {
			artErr = fmt.Errorf("CRI-O suite artifacts missing (make setup builds them; make build the project's): %s", strings.Join(missing, ", "))
			return
		}
		artVal = a
	})
	return artVal, artErr
}

// node is one private CRI-O with its own everything under Dir.
type node struct {
	Dir        string
	Socket     string
	Endpoint   string
	ConfigPath string
	CNIConfDir string
	CNIBinDir  string
	NsDir      string // namespaces_dir: pinns pins pod netns under NsDir/netns
	LogPath    string
	Root       string // containers-storage root
	RunRoot    string // containers-storage runroot and CRI-O's run state
	// CgroupParent is the cgroupfs parent of every sandbox of the node.
	CgroupParent string

	art     artifacts
	t       *testing.T
	cmd     *exec.Cmd
	waitErr chan error
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient

	bridges, networks []string
	tornDown          sync.Once // teardown runs once: t.Cleanup or OnInterrupt
}

// NetnsDir is where this CRI-O's pinns puts the pods' network namespaces:
// the daemon's --netns-dir on a CRI-O node (/var/run/netns there by default).
func (n *node) NetnsDir() string { return filepath.Join(n.NsDir, "netns") }

// startNode sets up and starts a node for t; t.Cleanup tears everything down.
func startNode(t *testing.T) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e/crio: skipped: needs root (runs CRI-O, conmon, runc and CNI plugins that create namespaces and bridges)")
	}
	art, err := ensureArtifacts()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", envPrefix)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{
		Dir:          dir,
		Socket:       filepath.Join(dir, "crio.sock"),
		ConfigPath:   filepath.Join(dir, "crio.conf"),
		CNIConfDir:   filepath.Join(dir, "cni-conf"),
		CNIBinDir:    filepath.Join(dir, "cni-bin"),
		NsDir:        filepath.Join(dir, "ns"),
		LogPath:      filepath.Join(dir, "crio.log"),
		Root:         filepath.Join(dir, "root"),
		RunRoot:      filepath.Join(dir, "run"),
		CgroupParent: "/" + filepath.Base(dir),
		art:          art,
		t:            t,
	}
	n.Endpoint = "unix://" + n.Socket
	unregister := harness.OnInterrupt(func() { n.teardown(harness.StderrLogf("e2e/crio cleanup (interrupted): ")) })
	t.Cleanup(func() {
		n.teardown(func(f string, a ...any) { t.Logf("e2e/crio cleanup: "+f, a...) })
		unregister()
	})
	for _, d := range []string{n.CNIConfDir, n.CNIBinDir, n.NsDir, filepath.Join(dir, "conf.d"), filepath.Join(dir, "lib"), filepath.Join(dir, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"bridge", "loopback"} {
		if err := harness.CopyExecutable(filepath.Join(art.cniBin, p), filepath.Join(n.CNIBinDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := harness.CopyExecutable(art.hostlease, filepath.Join(n.CNIBinDir, "hostlease")); err != nil {
		t.Fatal(err)
	}
	if err := harness.BuildGoBinary(harness.ModulePath+"/e2e/failplugin", filepath.Join(n.CNIBinDir, harness.FailPlugin)); err != nil {
		t.Fatal(err)
	}
	// No registry is reachable: no search registries, any image accepted.
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "registries.conf"), []byte("unqualified-search-registries = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.ConfigPath, []byte(n.config()), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n.importPause()
	n.start()
	t.Logf("crio node %s: CRI-O %s up in %v", dir, crioVersion, time.Since(start).Round(time.Millisecond))
	return n
}

// config is the node's crio.conf: private dirs, cgroupfs, conmon in the pod
// cgroup, runc, the local pause image, no infra container for sandboxes that
// do not share a PID namespace (CRI-O's default, what kubelet's pods get),
// its own CNI dirs and netns dir, no NRI, no metrics.
func (n *node) config() string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return fmt.Sprintf(`# generated by e2e/crio for one test
[crio]
root = %s
runroot = %s
storage_driver = "overlay"
log_dir = %s
version_file = %s
version_file_persist = %s
clean_shutdown_file = %s

[crio.api]
listen = %s
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
conmon_cgroup = "pod"
cgroup_manager = "cgroupfs"
drop_infra_ctr = true
namespaces_dir = %s
pinns_path = %s
container_exits_dir = %s
container_attach_socket_dir = %s
hooks_dir = []
log_level = "debug"

[crio.runtime.runtimes.runc]
runtime_path = %s
runtime_type = "oci"
runtime_root = %s
monitor_path = %s
monitor_cgroup = "pod"

[crio.image]
pause_image = %s
signature_policy = %s

[crio.network]
network_dir = %s
plugin_dirs = [%s]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
`, q(n.Root), q(n.RunRoot), q(filepath.Join(n.Dir, "pods")), q(filepath.Join(n.RunRoot, "crio-version")),
		q(filepath.Join(n.Dir, "lib", "version")), q(filepath.Join(n.Dir, "lib", "clean.shutdown")),
		q(n.Socket), q(n.NsDir), q(n.art.pinns), q(filepath.Join(n.RunRoot, "exits")), q(filepath.Join(n.RunRoot, "attach")),
		q(n.art.runc), q(filepath.Join(n.RunRoot, "runc")), q(n.art.conmon),
		q(harness.PauseImage), q(filepath.Join(n.Dir, "policy.json")), q(n.CNIConfDir), q(n.CNIBinDir))
}

// importPause copies the pause archive into the node's containers-storage.
func (n *node) importPause() {
	n.t.Helper()
	dst := fmt.Sprintf("containers-storage:[overlay@%s+%s]%s", n.Root, n.RunRoot, harness.PauseImage)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.art.skopeo, "--policy", filepath.Join(n.Dir, "policy.json"), "copy", "--quiet",
		"docker-archive:"+n.art.pauseTar, dst)
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("skopeo copy %s: %v\n%s", n.art.pauseTar, err, out)
	}
}

// start launches CRI-O and waits until CRI answers Version.
func (n *node) start() {
	n.t.Helper()
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== e2e/crio: starting CRI-O at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(n.art.crio, "--config", n.ConfigPath, "--config-dir", filepath.Join(n.Dir, "conf.d"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "CONTAINERS_REGISTRIES_CONF="+filepath.Join(n.Dir, "registries.conf"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.cmd, n.waitErr = cmd, make(chan error, 1)
	go func() { n.waitErr <- cmd.Wait() }()
	deadline := time.Now().Add(hangGuard)
	for {
		select {
		case werr := <-n.waitErr:
			n.waitErr <- werr
			n.cmd = nil
			n.t.Fatalf("CRI-O exited during start: %v\n%s", werr, n.LogTail(40))
		default:
		}
		if _, err := os.Stat(n.Socket); err == nil {
			if err := n.connect(); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v, verr := n.rt.Version(ctx, &runtimeapi.VersionRequest{})
				cancel()
				if verr == nil {
					if v.RuntimeVersion != crioVersion {
						n.t.Fatalf("CRI-O says version %q, the suite is for %s", v.RuntimeVersion, crioVersion)
					}
					return
				}
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("hung: CRI-O not serving on %s within the %v hang guard\n%s", n.Socket, hangGuard, n.LogTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *node) connect() error {
	if n.conn != nil {
		n.conn.Close()
	}
	conn, err := grpc.NewClient(n.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	n.conn, n.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	return nil
}

// stop stops CRI-O: SIGTERM (SIGKILL after 20 s), or SIGKILL at once when kill.
func (n *node) stop(kill bool) {
	if n.conn != nil {
		n.conn.Close()
		n.conn = nil
	}
	if n.cmd == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = n.cmd.Process.Signal(sig)
	select {
	case <-n.waitErr:
	case <-time.After(20 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.waitErr
	}
	n.cmd = nil
}

// restart stops CRI-O (SIGTERM) and starts it again on the same state.
func (n *node) restart() {
	n.t.Helper()
	n.stop(false)
	n.start()
}

// teardown tears the node down, once.
func (n *node) teardown(logf func(string, ...any)) { n.tornDown.Do(func() { n.cleanup(logf) }) }

func (n *node) cleanup(logf func(string, ...any)) {
	if n.t.Failed() {
		logf("%s", n.LogTail(60))
	}
	// Triggers off, so the teardown's DELs succeed.
	for _, f := range []string{"fail-add", "fail-del", "hold-add", "delay-add"} {
		_ = os.Remove(filepath.Join(n.Dir, f))
	}
	if n.cmd != nil && n.rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if resp, err := n.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
			for _, sb := range resp.Items {
				if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
					logf("stop %s: %v", sb.Id[:12], err)
				}
				if _, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
					logf("remove %s: %v", sb.Id[:12], err)
				}
			}
		}
		cancel()
	}
	n.stop(false)
	harness.TeardownRuntimeDir(n.Dir, 0, n.CgroupParent, n.bridges, n.networks, logf)
}

// LogTail returns the last lines of CRI-O's log.
func (n *node) LogTail(lines int) string { return harness.LogFileTail("CRI-O", n.LogPath, lines) }

// pod names a sandbox as kubelet does.
type pod struct {
	Name, UID string
	Attempt   uint32
}

// sandboxConfig is what kubelet sends for a pod without shareProcessNamespace:
// pod network namespace, container PID namespace (so CRI-O runs no infra
// container), the node's cgroup parent.
func (n *node) sandboxConfig(p pod) *runtimeapi.PodSandboxConfig {
	uid := p.UID
	if uid == "" {
		uid = "uid-" + p.Name
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: "default", Uid: uid, Attempt: p.Attempt},
		Hostname:     p.Name,
		LogDirectory: filepath.Join(n.Dir, "pods", p.Name+"_"+uid),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: n.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

func ctxGuard() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), hangGuard)
}

// run runs a sandbox for p and returns its ID.
func (n *node) run(p pod) (string, error) {
	ctx, cancel := ctxGuard()
	defer cancel()
	resp, err := n.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: n.sandboxConfig(p)})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

// mustRun runs a sandbox and returns its ID and IP.
func (n *node) mustRun(p pod) (string, string) {
	n.t.Helper()
	id, err := n.run(p)
	if err != nil {
		n.t.Fatalf("RunPodSandbox %s: %v\n%s", p.Name, err, n.LogTail(30))
	}
	st := n.status(id)
	return id, st.GetNetwork().GetIp()
}

func (n *node) status(id string) *runtimeapi.PodSandboxStatus {
	n.t.Helper()
	ctx, cancel := ctxGuard()
	defer cancel()
	resp, err := n.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		n.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp.Status
}

func (n *node) stopPod(id string) error {
	ctx, cancel := ctxGuard()
	defer cancel()
	_, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func (n *node) removePod(id string) error {
	ctx, cancel := ctxGuard()
	defer cancel()
	_, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

// sandboxes lists every sandbox CRI-O knows.
func (n *node) sandboxes() []*runtimeapi.PodSandbox {
	n.t.Helper()
	ctx, cancel := ctxGuard()
	defer cancel()
	resp, err := n.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		n.t.Fatalf("ListPodSandbox: %v", err)
	}
	return resp.Items
}

// networkReady returns CRI Status's NetworkReady condition.
func (n *node) networkReady() *runtimeapi.RuntimeCondition {
	n.t.Helper()
	ctx, cancel := ctxGuard()
	defer cancel()
	resp, err := n.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		n.t.Fatalf("CRI Status: %v", err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c
		}
	}
	n.t.Fatal("CRI Status has no NetworkReady condition")
	return nil
}

// waitFor polls cond until it holds, failing as hung after the hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("hung: %s not reached within the %v hang guard", what, hangGuard)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// gcBin is a private copy of bin/hostlease-gc in the node dir.
func (n *node) gcBin() string {
	n.t.Helper()
	dst := filepath.Join(n.Dir, "hostlease-gc")
	if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
		if err := harness.CopyExecutable(n.art.hostleaseGC, dst); err != nil {
			n.t.Fatal(err)
		}
	}
	return dst
}

// startDaemon runs `hostlease-gc run` against this CRI-O's socket and netns dir.
func (n *node) startDaemon(dataDir string, args ...string) *harness.Daemon {
	n.t.Helper()
	return harness.StartDaemonOn(harness.DaemonHost{T: n.t, Dir: n.Dir, Endpoint: n.Endpoint, NetnsDir: n.NetnsDir(), GCBin: n.gcBin()},
		harness.DaemonOptions{DataDir: dataDir, Args: args})
}
