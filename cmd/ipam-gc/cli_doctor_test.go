package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// doctorNode is a node's CNI and daemon setup in temp dirs: a conf dir, a
// bin dir holding the built plugin, a data dir, a netns dir and a runtime.
type doctorNode struct {
	confDir, binDir, dataDir, netnsDir, cri string
}

func newDoctorNode(t *testing.T) *doctorNode {
	t.Helper()
	buildBinaries(t)
	n := &doctorNode{confDir: t.TempDir(), binDir: t.TempDir(), dataDir: t.TempDir(), netnsDir: t.TempDir(), cri: startCRI(t).Endpoint()}
	if err := os.Symlink(filepath.Join(binDir, "hostlease"), filepath.Join(n.binDir, "hostlease")); err != nil {
		t.Fatal(err)
	}
	return n
}

// conflist is a bridge network using the plugin with the commit marker last.
func (n *doctorNode) conflist(ipam map[string]any, plugins ...map[string]any) map[string]any {
	full := map[string]any{"type": "hostlease", "dataDir": n.dataDir, "ranges": [][]map[string]string{{{"subnet": "10.99.0.0/24"}}}}
	for k, v := range ipam {
		if v == nil {
			delete(full, k)
		} else {
			full[k] = v
		}
	}
	if plugins == nil {
		plugins = []map[string]any{{"type": "hostlease", "dataDir": n.dataDir}}
	}
	return map[string]any{"cniVersion": "1.0.0", "name": "podnet",
		"plugins": append([]map[string]any{{"type": "bridge", "bridge": "cni0", "ipam": full}}, plugins...)}
}

func (n *doctorNode) write(t *testing.T, name string, conf any) string {
	t.Helper()
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.confDir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (n *doctorNode) args(extra ...string) []string {
	return append([]string{"doctor", "--cni-conf-dir", n.confDir, "--cni-bin-dir", n.binDir, "--data-dir", n.dataDir,
		"--netns-dir", n.netnsDir, "--cri-endpoint", n.cri}, extra...)
}

// A node set up as the docs say passes; each thing wrong is one line on
// stdout naming where it is and its fix, and exit status 1.
func TestDoctorFindings(t *testing.T) {
	n := newDoctorNode(t)
	good := n.write(t, "10-podnet.conflist", n.conflist(nil))
	r := gcExec(t, n.args()...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "no problems found") {
		t.Fatalf("doctor on a good node: want exit 0 and no problem\n%s", r)
	}
	other := t.TempDir()
	for _, tc := range []struct {
		name string
		conf any
		want string
	}{
		{"marker missing", n.conflist(nil, map[string]any{"type": "portmap"}), "no commit marker"},
		{"marker not last", n.conflist(nil, map[string]any{"type": "hostlease", "dataDir": n.dataDir}, map[string]any{"type": "portmap"}),
			"the commit marker is plugin 2 of 3, not the last"},
		{"single plugin", map[string]any{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge",
			"ipam": map[string]any{"type": "hostlease", "dataDir": n.dataDir, "ranges": [][]map[string]string{{{"subnet": "10.99.0.0/24"}}}}},
			"a single-plugin config has no commit marker"},
		{"ipam dataDir differs", n.conflist(map[string]any{"dataDir": other}, map[string]any{"type": "hostlease", "dataDir": other}),
			"ipam dataDir is " + other + " but the daemon's --data-dir is " + n.dataDir},
		{"marker dataDir differs", n.conflist(nil, map[string]any{"type": "hostlease", "dataDir": other}),
			"the commit marker's dataDir is " + other + " but the daemon's --data-dir is " + n.dataDir},
		{"marker with an empty ipam (the plugin's marker too), dataDir differs", n.conflist(nil, map[string]any{"type": "hostlease", "ipam": map[string]any{}, "dataDir": other}),
			"the commit marker's dataDir is " + other + " but the daemon's --data-dir is " + n.dataDir},
		{"unknown key", n.conflist(map[string]any{"rangeStrat": "10.99.0.5"}), "ipam.rangeStrat is not a key hostlease (or host-local) reads"},
		{"unknown range key", n.conflist(map[string]any{"ranges": [][]map[string]string{{{"subnet": "10.99.0.0/24", "gatway": "10.99.0.1"}}}}),
			"ipam.ranges[0][0].gatway is not a key"},
		{"gateway outside subnet", n.conflist(map[string]any{"ranges": [][]map[string]string{{{"subnet": "10.99.0.0/24", "gateway": "10.98.0.1"}}}}),
			"gateway 10.98.0.1 is outside its subnet 10.99.0.0/24"},
		{"relative dataDir", n.conflist(map[string]any{"dataDir": "var/lib/cni/hostlease"}), `ipam dataDir "var/lib/cni/hostlease" is relative`},
		{"rangeStart after rangeEnd", n.conflist(map[string]any{"ranges": [][]map[string]string{{{"subnet": "10.99.0.0/24", "rangeStart": "10.99.0.50", "rangeEnd": "10.99.0.20"}}}}),
			"rangeStart 10.99.0.50 is after rangeEnd 10.99.0.20"},
		{"no network uses the plugin", map[string]any{"cniVersion": "1.0.0", "name": "podnet", "plugins": []map[string]any{{"type": "bridge", "ipam": map[string]any{"type": "host-local"}}}},
			`no network config uses ipam type "hostlease"`},
	} {
		path := n.write(t, "10-podnet.conflist", tc.conf)
		where := path
		if tc.name == "no network uses the plugin" {
			where = n.confDir
		}
		r := gcExec(t, n.args()...)
		if r.code != exitFailed || !hasFinding(r.stdout, where, tc.want) {
			t.Errorf("doctor, %s: want exit 1 and a line %q ... %q ... fix:\n%s", tc.name, where, tc.want, r)
		}
	}
	n.write(t, "10-podnet.conflist", n.conflist(nil))
	if r := gcExec(t, n.args()...); r.code != 0 {
		t.Fatalf("doctor on the good node again: %s", r)
	}
	_ = good

	// The daemon's own settings: the data dir's trust, CRI, the plugin's version.
	if r := gcExec(t, n.args("--cri-endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"))...); r.code != exitFailed || !hasFinding(r.stdout, "unix://", "CRI is not usable") {
		t.Errorf("doctor without CRI: %s", r)
	}
	if r := gcExec(t, n.args("--data-dir", filepath.Join(other, "typo"))...); r.code != exitFailed || !hasFinding(r.stdout, filepath.Join(other, "typo"), "the data dir does not exist") {
		t.Errorf("doctor with a mistyped --data-dir: %s", r)
	}
	if err := os.Chmod(n.dataDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, n.args()...); r.code != exitFailed || !hasFinding(r.stdout, n.dataDir, "the data dir is refused") {
		t.Errorf("doctor with a world-writable data dir: %s", r)
	}
	if err := os.Chmod(n.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	oldPlugin := filepath.Join(t.TempDir(), "hostlease")
	if err := os.WriteFile(oldPlugin, []byte("#!/bin/sh\necho 'hostlease v0.0.1 (CNI IPAM, host-local compatible)' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, n.args("--cni-bin-dir", filepath.Dir(oldPlugin))...); r.code != exitFailed || !hasFinding(r.stdout, oldPlugin, "plugin version v0.0.1, daemon version dev") {
		t.Errorf("doctor with another version of the plugin: %s", r)
	}
	if r := gcExec(t, n.args("--cni-bin-dir", t.TempDir())...); r.code != exitFailed || !strings.Contains(r.stdout, "the plugin is not installed") {
		t.Errorf("doctor without the plugin installed: %s", r)
	}
}

// A record whose netns the plugin saw in another directory than
// --netns-dir cannot be proven dead by it: doctor says --netns-dir is not
// verified; given the runtime's directory, it is.
func TestDoctorNetnsDirNotVerified(t *testing.T) {
	n := newDoctorNode(t)
	n.write(t, "10-podnet.conflist", n.conflist(nil))
	runtimeNetns := t.TempDir()
	netns := filepath.Join(runtimeNetns, "cni-1234")
	if err := os.WriteFile(netns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cniExec(t, ipamNet{name: "podnet", dataDir: n.dataDir, rangeSets: subnets("10.99.0.0/24")},
		pluginCall{plugin: "hostlease", command: "ADD", containerID: "sandbox-a", netns: netns})
	r := gcExec(t, n.args()...)
	if r.code != exitFailed || !hasFinding(r.stdout, n.netnsDir, "--netns-dir is not verified") {
		t.Errorf("doctor with records outside --netns-dir: %s", r)
	}
	if r := gcExec(t, n.args("--netns-dir", runtimeNetns)...); r.code != 0 {
		t.Errorf("doctor with the runtime's netns dir: %s", r)
	}
}

// A store on a read-only mount is a finding of doctor and a READ-ONLY note
// of status (exit 1 for both): the plugin's ADD and DEL would fail on it.
// The mount is made in a private mount namespace that ends with the command.
func TestReadOnlyStoreShown(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1)")
	}
	n := newDoctorNode(t)
	n.write(t, "10-podnet.conflist", n.conflist(nil))
	add(t, ipamNet{name: "podnet", dataDir: n.dataDir, rangeSets: subnets("10.99.0.0/24")}, "sandbox-a")
	gcRO := func(args ...string) result {
		script := `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"`
		return gcExecCmd(t, "unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh", n.dataDir,
			filepath.Join(binDir, "hostlease-gc")}, args...)...)
	}
	store := filepath.Join(n.dataDir, "podnet.db")
	r := gcRO(n.args("--netns-dir", "/var/run/netns")...)
	if r.code != exitFailed || !hasFinding(r.stdout, store, "is not writable") {
		t.Errorf("doctor with a read-only store: %s", r)
	}
	r = gcRO("status", "-d", n.dataDir)
	if r.code != exitFailed || !strings.Contains(r.stdout, "READ-ONLY: store file "+store+" is not writable") || !strings.Contains(r.stderr, "cannot be written") {
		t.Errorf("status with a read-only store: want a READ-ONLY note and exit 1\n%s", r)
	}
	r = gcRO("status", "-d", n.dataDir, "-o", "json")
	if r.code != exitFailed || !strings.Contains(r.stdout, `"readOnly": "store file `+store+` is not writable`) {
		t.Errorf("status -o json with a read-only store: %s", r)
	}
	if r := gcExec(t, "status", "-d", n.dataDir); r.code != 0 || strings.Contains(r.stdout, "READ-ONLY") {
		t.Errorf("status of the same store, writable: %s", r)
	}
}

// hasFinding reports whether out has a finding line at where saying want,
// with its fix.
func hasFinding(out, where, want string) bool {
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, where) && strings.Contains(l, want) && strings.Contains(l, "; fix: ") {
			return true
		}
	}
	return false
}
