// Package harness runs a private containerd (any version of
// containerd-versions.txt: 1.7.x with a version 2 config, 2.x with a version 3
// config) with the CRI plugin and real CNI plugins for the hostlease
// end-to-end tests.
//
// An Env is one containerd instance that belongs to one test:
//   - everything it writes lives in its own temp dir (root, state, sockets,
//     netns mounts, runc root, CNI bin and conf dirs, logs); the only host
//     paths it touches are /run/containerd/s (shim sockets, named by a hash of
//     the env's socket path) and /var/lib/cni/results (libcni's result cache,
//     one file per network name and sandbox);
//   - t.Cleanup tears it all down whether the test passed or failed: the
//     failplugin trigger files named in written conflists are removed, every
//     sandbox is stopped and removed through CRI, containerd, its shims and
//     their containers are killed by PID, everything mounted under the temp
//     dir is unmounted, bridges named in written conflists are deleted,
//     libcni cache files of those networks and the sandbox cgroups are
//     removed, and the temp dir goes last;
//   - an env left behind by a killed test process is reaped the same way by
//     the next Setup in any process.
//
// Tests need root; Setup skips (with the reason printed) otherwise.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// envPrefix starts the name of every env temp dir (under os.TempDir()); the
// stale-env reaper only looks at dirs with this prefix.
const envPrefix = "hostlease-e2e-"

// FailPlugin is the CNI type name of e2e/failplugin in every env's bin dir.
const FailPlugin = "failplugin"

// Options tune Setup. The zero value is fine.
type Options struct {
	// ExtraBins are more CNI plugin binaries to put into the bin dir, as
	// name (the CNI "type") -> path; e.g. {"hostlease": "../bin/hostlease"}.
	// They are copied, so rebuilding the source binary cannot affect a
	// running test.
	ExtraBins map[string]string
	// StartTimeout bounds containerd's start (default 60s).
	StartTimeout time.Duration
}

// Env is one private containerd with CRI. Its exported fields are fixed
// after Setup.
type Env struct {
	Version    Version // the containerd version it runs (Artifacts.Version)
	Dir        string  // the env's temp dir; everything below is inside it
	Socket     string  // containerd's gRPC (and CRI) unix socket path
	Endpoint   string  // "unix://" + Socket, the form CRI clients take
	CNIBinDir  string  // CNI plugins dir given to containerd
	CNIConfDir string  // CNI conf dir watched by containerd
	ConfigPath string  // containerd config.toml
	LogPath    string  // containerd's log (all starts appended)
	RuncRoot   string  // runc --root of the runc shim (namespace k8s.io below it)
	Artifacts  Artifacts

	// CgroupParent is the cgroupfs parent of every sandbox started through
	// the env's helpers ("/" + a name unique to the env).
	CgroupParent string

	t       testing.TB
	cmd     *exec.Cmd
	waitErr chan error
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient

	written  map[string][]byte // conf file name -> content, for cleanup
	tornDown sync.Once         // teardown runs once: t.Cleanup or OnInterrupt
}

// Setup starts a fresh Env for t (see the package doc for what it
// guarantees) with default Options.
func Setup(t testing.TB) *Env { return SetupWith(t, Options{}) }

// SetupWith is Setup with options.
func SetupWith(t testing.TB, opts Options) *Env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e: skipped: needs root (runs containerd, runc and CNI plugins that create namespaces and bridges)")
	}
	reapStaleEnvs(t)
	art, err := EnsureArtifacts()
	if err != nil {
		t.Fatalf("e2e artifacts: %v", err)
	}
	dir, err := os.MkdirTemp("", envPrefix)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{
		Version:    art.Version,
		Dir:        dir,
		Socket:     filepath.Join(dir, "containerd.sock"),
		CNIBinDir:  filepath.Join(dir, "cni-bin"),
		CNIConfDir: filepath.Join(dir, "cni-conf"),
		ConfigPath: filepath.Join(dir, "config.toml"),
		LogPath:    filepath.Join(dir, "containerd.log"),
		RuncRoot:   filepath.Join(dir, "runc"),
		Artifacts:  art,
		// cgroup names must be unique on the host, the dir name is.
		CgroupParent: "/" + filepath.Base(dir),
		t:            t,
		written:      map[string][]byte{},
	}
	e.Endpoint = "unix://" + e.Socket
	// Registered before anything can fail, so a half-built env is torn down too.
	unregister := OnInterrupt(func() { e.teardown(StderrLogf("e2e cleanup (interrupted): ")) })
	t.Cleanup(func() {
		e.teardown(func(f string, a ...any) { t.Logf("e2e cleanup: "+f, a...) })
		unregister()
	})
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.CNIBinDir, e.CNIConfDir, e.RuncRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.assembleBinDir(opts.ExtraBins); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.ConfigPath, []byte(e.config()), 0o644); err != nil {
		t.Fatal(err)
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	start := time.Now()
	if err := e.start(timeout); err != nil {
		t.Fatalf("start containerd: %v\n%s", err, e.LogTail(40))
	}
	if err := e.importPause(timeout); err != nil {
		t.Fatalf("import pause image: %v\n%s", err, e.LogTail(40))
	}
	t.Logf("e2e env %s: containerd %s up and pause image imported in %v", dir, e.Version, time.Since(start).Round(time.Millisecond))
	return e
}

// assembleBinDir copies the reference plugins, builds the failplugin and
// copies the extra binaries into CNIBinDir.
func (e *Env) assembleBinDir(extra map[string]string) error {
	for _, name := range []string{"bridge", "loopback", "host-local"} {
		if err := copyFile(filepath.Join(e.Artifacts.CNIBinDir, name), filepath.Join(e.CNIBinDir, name)); err != nil {
			return err
		}
	}
	if err := BuildGoBinary(ModulePath+"/e2e/failplugin", filepath.Join(e.CNIBinDir, FailPlugin)); err != nil {
		return err
	}
	for name, src := range extra {
		if strings.Contains(name, "/") {
			return fmt.Errorf("extra bin name %q must be a plain CNI type name", name)
		}
		if err := copyFile(src, filepath.Join(e.CNIBinDir, name)); err != nil {
			return fmt.Errorf("extra bin %s: %w", name, err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// CNIVersion is the newest CNI spec version this containerd's libcni takes
// in a conflist: containerd 1.x vendors a libcni without CNI 1.1.0 (so it
// never calls STATUS or GC), 2.x supports 1.1.0.
func (e *Env) CNIVersion() string {
	if e.Version.Major < 2 {
		return "1.0.0"
	}
	return "1.1.0"
}

// config renders containerd's config for e.Version.
func (e *Env) config() string {
	return ContainerdConfig(e.Version, ContainerdPaths{
		Root: filepath.Join(e.Dir, "root"), State: filepath.Join(e.Dir, "state"), Temp: filepath.Join(e.Dir, "tmp"),
		Socket: e.Socket, CNIBinDir: e.CNIBinDir, CNIConfDir: e.CNIConfDir,
		Runc: e.Artifacts.Runc, RuncRoot: e.RuncRoot,
	})
}

// ContainerdPaths are the files and directories a test's containerd config
// names; everything containerd writes stays under them.
type ContainerdPaths struct {
	Root, State, Temp string // containerd's root, state and temp dirs
	Socket            string // gRPC (and CRI) socket; ttrpc uses Socket+".ttrpc"
	CNIBinDir         string
	CNIConfDir        string
	Runc              string // runc binary (absolute)
	RuncRoot          string // runc --root
}

// ContainerdConfig renders the config every test containerd runs with, for
// version v: the CRI plugin with CNI from p's dirs (one conflist at a time),
// the pinned local pause image, runc from p with cgroupfs, no NRI, no CDI,
// restrict_oom_score_adj (this machine lacks CAP_SYS_RESOURCE), netns under
// the state dir; version 3 for containerd 2.x, version 2 for 1.x.
func ContainerdConfig(v Version, p ContainerdPaths) string {
	if v.Major < 2 {
		return configV2(v, p)
	}
	return configV3(v, p)
}

// configHeader is what both config versions share: the file's dirs and
// sockets, debug logging, no NRI, and the CRI plugin's stream server on
// loopback; the version-specific CRI sections follow it.
func configHeader(b *strings.Builder, version int, v Version, p ContainerdPaths) {
	q := func(s string) string { return "'" + s + "'" }
	fmt.Fprintf(b, `# generated by e2e/harness for one test (containerd %s)
version = %d
root = %s
state = %s
temp = %s
# /opt/containerd is host-wide; nothing here needs it.
disabled_plugins = ['io.containerd.internal.v1.opt']

[grpc]
  address = %s

[ttrpc]
  address = %s

[debug]
  level = 'debug'

[plugins]
  [plugins.'io.containerd.nri.v1.nri']
    disable = true

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`, v, version, q(p.Root), q(p.State), q(p.Temp), q(p.Socket), q(p.Socket+".ttrpc"))
}

// configV3 is containerd 2.x's config (version 3: the CRI plugin is split
// into io.containerd.cri.v1.images and io.containerd.cri.v1.runtime).
func configV3(v Version, p ContainerdPaths) string {
	q := func(s string) string { return "'" + s + "'" }
	var b strings.Builder
	configHeader(&b, 3, v, p)
	fmt.Fprintf(&b, `
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %s

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%s]
      conf_dir = %s
      max_conf_num = 1
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = %s
          Root = %s
`, q(PauseImage), q(p.CNIBinDir), q(p.CNIConfDir), q(p.Runc), q(p.RuncRoot))
	return b.String()
}

// configV2 is containerd 1.7's config (version 2: one CRI plugin,
// io.containerd.grpc.v1.cri, holding images, runtimes and CNI; the CNI bin
// dir is the single bin_dir; the sandbox image is sandbox_image).
func configV2(v Version, p ContainerdPaths) string {
	q := func(s string) string { return "'" + s + "'" }
	var b strings.Builder
	configHeader(&b, 2, v, p)
	fmt.Fprintf(&b, `    sandbox_image = %s
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins.'io.containerd.grpc.v1.cri'.cni]
      bin_dir = %s
      conf_dir = %s
      max_conf_num = 1
    [plugins.'io.containerd.grpc.v1.cri'.containerd]
      snapshotter = 'overlayfs'
      default_runtime_name = 'runc'
      [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = %s
          Root = %s
`, q(PauseImage), q(p.CNIBinDir), q(p.CNIConfDir), q(p.Runc), q(p.RuncRoot))
	return b.String()
}

// start launches containerd and waits until CRI answers Version.
func (e *Env) start(timeout time.Duration) error {
	logf, err := os.OpenFile(e.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== harness: starting containerd at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(e.Artifacts.Containerd, "--config", e.ConfigPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The shim is looked up on PATH; runc is given by absolute path.
	cmd.Env = append(filterEnv(os.Environ(), "PATH"),
		"PATH="+filepath.Dir(e.Artifacts.Shim)+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	// Die with the test process even if it is killed before cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.cmd = cmd
	e.waitErr = make(chan error, 1)
	go func() { e.waitErr <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(e.Dir, "containerd.pid"), []byte(fmt.Sprint(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}

	deadline := time.Now().Add(timeout)
	for {
		select {
		case werr := <-e.waitErr:
			e.waitErr <- werr
			return fmt.Errorf("containerd exited during start: %v", werr)
		default:
		}
		if _, err := os.Stat(e.Socket); err == nil {
			if err := e.connect(); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, verr := e.rt.Version(ctx, &runtimeapi.VersionRequest{})
				cancel()
				if verr == nil {
					return nil
				}
				err = verr
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRI not serving on %s after %v", e.Socket, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func filterEnv(env []string, drop string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, drop+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func (e *Env) connect() error {
	if e.conn != nil {
		e.conn.Close()
		e.conn = nil
	}
	conn, err := grpc.NewClient(e.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	e.conn = conn
	e.rt = runtimeapi.NewRuntimeServiceClient(conn)
	e.img = runtimeapi.NewImageServiceClient(conn)
	return nil
}

// importPause imports the cached pause archive into namespace k8s.io and
// waits until CRI's image service reports it.
func (e *Env) importPause(timeout time.Duration) error {
	out, err := e.Ctr("images", "import", e.Artifacts.PauseTar)
	if err != nil {
		return fmt.Errorf("ctr images import: %v\n%s", err, out)
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := e.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: PauseImage}})
		cancel()
		if err == nil && st.GetImage() != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRI does not list %s after import (last err %v); ctr said:\n%s", PauseImage, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ctr runs the cached ctr against this env's containerd in namespace k8s.io
// and returns its combined output.
func (e *Env) Ctr(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Artifacts.Ctr, append([]string{"-a", e.Socket, "-n", "k8s.io"}, args...)...)
	return cmd.CombinedOutput()
}

// Restart stops containerd (SIGTERM, SIGKILL after 15s) and starts it again
// with the same config and state. Shims and sandboxes keep running across the
// restart, as on a real node; CRI helpers use the new connection afterwards.
func (e *Env) Restart() {
	e.t.Helper()
	if err := e.stopContainerd(15 * time.Second); err != nil {
		e.t.Fatalf("stop containerd: %v", err)
	}
	if err := e.start(60 * time.Second); err != nil {
		e.t.Fatalf("restart containerd: %v\n%s", err, e.LogTail(40))
	}
}

// Kill stops containerd with SIGKILL (a crash) and does not start it again;
// call Start to bring it back.
func (e *Env) Kill() {
	e.t.Helper()
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Kill()
	<-e.waitErr
	e.cmd = nil
	if e.conn != nil {
		e.conn.Close()
		e.conn = nil
	}
}

// Start starts containerd again after Kill.
func (e *Env) Start() {
	e.t.Helper()
	if e.cmd != nil {
		e.t.Fatal("containerd is already running")
	}
	if err := e.start(60 * time.Second); err != nil {
		e.t.Fatalf("start containerd: %v\n%s", err, e.LogTail(40))
	}
}

func (e *Env) stopContainerd(grace time.Duration) error {
	if e.conn != nil {
		e.conn.Close()
		e.conn = nil
	}
	if e.cmd == nil {
		return nil
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.waitErr:
	case <-time.After(grace):
		_ = e.cmd.Process.Kill()
		<-e.waitErr
	}
	e.cmd = nil
	return nil
}

// LogTail returns the last n lines of containerd's log.
func (e *Env) LogTail(n int) string { return LogFileTail("containerd", e.LogPath, n) }

// LogFileTail returns the last n lines of the log of who at path, headed
// with both, for a failed test's output.
func LogFileTail(who, path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no %s log: %v)", who, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "---- " + who + " log tail (" + path + ") ----\n" + strings.Join(lines, "\n")
}

// Log returns containerd's whole log so far.
func (e *Env) Log() string {
	b, _ := os.ReadFile(e.LogPath)
	return string(b)
}

// WriteConflist writes a CNI config into CNIConfDir atomically (temp file in
// the same dir + rename), so containerd's watcher never reads a partial
// file. name is the file name; ".conflist" is appended when it has no
// extension. The content must be valid JSON. The network name, bridge names
// and failplugin trigger files in it are remembered for cleanup.
func (e *Env) WriteConflist(name string, conf []byte) {
	e.t.Helper()
	if strings.Contains(name, "/") || name == "" {
		e.t.Fatalf("WriteConflist: %q must be a plain file name", name)
	}
	if filepath.Ext(name) == "" {
		name += ".conflist"
	}
	if !json.Valid(conf) {
		e.t.Fatalf("WriteConflist %s: not valid JSON:\n%s", name, conf)
	}
	tmp, err := os.CreateTemp(e.CNIConfDir, ".tmp-"+name+"-")
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tmp.Write(conf); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(e.CNIConfDir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		e.t.Fatalf("WriteConflist %s: %v", name, err)
	}
	e.written[name] = bytes.Clone(conf)
}

// RemoveConflist deletes a conf file written by WriteConflist (cleanup still
// remembers its bridges and networks).
func (e *Env) RemoveConflist(name string) {
	e.t.Helper()
	if filepath.Ext(name) == "" {
		name += ".conflist"
	}
	if err := os.Remove(filepath.Join(e.CNIConfDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.t.Fatal(err)
	}
}

// conflistFacts is what cleanup needs out of a written conflist.
type conflistFacts struct {
	network  string
	bridges  []string
	triggers []string
}

func parseConflist(b []byte) conflistFacts {
	var raw struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	var f conflistFacts
	if json.Unmarshal(b, &raw) != nil {
		return f
	}
	f.network = raw.Name
	for _, p := range raw.Plugins {
		if p["type"] == "bridge" {
			if br, ok := p["bridge"].(string); ok && br != "" {
				f.bridges = append(f.bridges, br)
			}
		}
		for _, k := range []string{"failAddFile", "failDelFile", "delayAddFile", "holdAddFile"} {
			if s, ok := p[k].(string); ok && s != "" {
				f.triggers = append(f.triggers, s)
			}
		}
	}
	return f
}
