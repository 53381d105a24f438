package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/internal/testing/fakecri"
	"github.com/hostlease/hostlease/internal/testing/testbin"
)

// The tests in cli_*_test.go exec the built binaries: hostlease-gc, the
// hostlease plugin (which writes the stores they read, exactly as a runtime
// would make it) and the reference host-local plugin (what a rollback goes
// back to). They are built once, on first use, into binDir.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func buildBinaries(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = testbin.BuildTemp("hostlease-gc-cli-bin-", map[string]string{
			"hostlease-gc": testbin.GC, "hostlease": testbin.Plugin, "host-local": testbin.HostLocal,
		})
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// result is one hostlease-gc process's output and exit status.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// gcExec runs the hostlease-gc binary as an operator would at a node shell:
// no NODE_NAME, no kubeconfig, nothing on stdin.
func gcExec(t *testing.T, args ...string) result {
	t.Helper()
	buildBinaries(t)
	return gcExecCmd(t, filepath.Join(binDir, "hostlease-gc"), args...)
}

// gcExecCmd runs name (a command that runs hostlease-gc) as gcExec does.
func gcExecCmd(t *testing.T, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute): // hang guard only
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("hostlease-gc %q hung", args)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("hostlease-gc %q: %v", args, err)
	}
	return r
}

// ipamNet is a network config as a bridge plugin hands it to its IPAM
// plugin; ipamType is "hostlease" or "host-local" (the same config either
// way, which is what a rollback relies on).
type ipamNet struct {
	name, dataDir string
	rangeSets     [][]map[string]string
}

func (n ipamNet) conf(t *testing.T, ipamType string) []byte {
	t.Helper()
	ipam := map[string]any{"type": ipamType, "ranges": n.rangeSets}
	if n.dataDir != "" {
		ipam["dataDir"] = n.dataDir
	}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": n.name, "type": "bridge", "ipam": ipam})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func subnets(cidrs ...string) [][]map[string]string {
	var sets [][]map[string]string
	for _, c := range cidrs {
		sets = append(sets, []map[string]string{{"subnet": c}})
	}
	return sets
}

// pluginCall is one CNI invocation of plugin ("hostlease" or "host-local").
type pluginCall struct {
	plugin, command, containerID, ifname string
	podNamespace, podName, podUID        string
	netns                                string // default /var/run/netns/cni-test-<containerID>
}

// cniExec runs the plugin as a runtime would and returns the addresses of
// its result (ADD) or fails the test on a CNI error.
func cniExec(t *testing.T, n ipamNet, c pluginCall) []netip.Addr {
	t.Helper()
	ips, err := cniTry(t, n, c)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

// cniTry is cniExec returning the plugin's failure instead.
func cniTry(t *testing.T, n ipamNet, c pluginCall) ([]netip.Addr, error) {
	t.Helper()
	buildBinaries(t)
	if c.ifname == "" {
		c.ifname = "eth0"
	}
	args := "IgnoreUnknown=1"
	if c.podName != "" {
		args += ";K8S_POD_NAMESPACE=" + c.podNamespace + ";K8S_POD_NAME=" + c.podName + ";K8S_POD_UID=" + c.podUID +
			";K8S_POD_INFRA_CONTAINER_ID=" + c.containerID
	}
	cmd := exec.Command(filepath.Join(binDir, c.plugin))
	if c.netns == "" {
		c.netns = "/var/run/netns/cni-test-" + c.containerID
	}
	cmd.Env = []string{
		"CNI_COMMAND=" + c.command, "CNI_CONTAINERID=" + c.containerID, "CNI_NETNS=" + c.netns,
		"CNI_IFNAME=" + c.ifname, "CNI_ARGS=" + args, "CNI_PATH=" + binDir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
	cmd.Stdin = bytes.NewReader(n.conf(t, c.plugin))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s %s: %v\nstdout: %s\nstderr: %s", c.plugin, c.command, c.containerID, err, stdout.Bytes(), stderr.Bytes())
	}
	if c.command != "ADD" {
		return nil, nil
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("%s ADD result %q: %v", c.plugin, stdout.Bytes(), err)
	}
	var ips []netip.Addr
	for _, ip := range res.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return nil, err
		}
		ips = append(ips, p.Addr())
	}
	return ips, nil
}

// add runs the hostlease plugin's ADD for a pod.
func add(t *testing.T, n ipamNet, containerID string) []netip.Addr {
	t.Helper()
	return cniExec(t, n, pluginCall{plugin: "hostlease", command: "ADD", containerID: containerID,
		podNamespace: "default", podName: "web-" + containerID, podUID: "uid-" + containerID})
}

// assertTerminalSafe fails when out holds a byte a terminal or a line-based
// reader would interpret: any control character but the line ends, DEL, or
// a Unicode format character (bidi overrides and the like).
func assertTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not valid UTF-8: %q", what, out)
	}
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x202e || r == 0x2028 || r == 0x200b {
			t.Errorf("%s: raw %U at byte %d:\n%q", what, r, i, out)
			return
		}
	}
	if !strings.HasSuffix(out, "\n") && out != "" {
		t.Errorf("%s: output does not end with a newline: %q", what, out)
	}
}

// startCRI serves a real gRPC CRI runtime (internal/testing/fakecri) on a unix
// socket in a short temporary directory (socket paths are limited to 108
// bytes) for the rest of the test.
func startCRI(t *testing.T) *fakecri.Server { return fakecri.StartForTest(t) }

// damageRecord replaces the stored value of ip's record in the store at path
// with value, as bit rot or a bad restore would: bbolt opens the file fine,
// the record does not decode.
func damageRecord(t *testing.T, path string, ip netip.Addr, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := recordKey(ip)
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("allocs"))
		if b == nil || b.Get(key) == nil {
			return fmt.Errorf("no record for %s in %s", ip, path)
		}
		return b.Put(key, value)
	}); err != nil {
		t.Fatal(err)
	}
}

// recordKey is the allocs bucket's key of ip: a family byte (4 or 6), then
// the address bytes.
func recordKey(ip netip.Addr) []byte {
	if ip.Is4() {
		return append([]byte{4}, ip.AsSlice()...)
	}
	return append([]byte{6}, ip.AsSlice()...)
}

// storedValue is the raw stored value of ip's record.
func storedValue(t *testing.T, path string, ip netip.Addr) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := recordKey(ip)
	var v []byte
	_ = db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket([]byte("allocs")).Get(key))
		return nil
	})
	return v
}
