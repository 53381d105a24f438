package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Exported pieces of the env teardown for e2e/k8s, which runs its own
// containerd (inside a private mount namespace, next to a kubelet) and must
// undo the same kinds of changes.

// TeardownDir removes everything a containerd rooted in dir may have left once
// it is no longer running: containers (runc under runcRoot), shims bound to
// socket, mounts under dir, the named bridges, libcni cache files of the named
// networks (and of every netns under dir), the cgroup parent (recursively, in
// every hierarchy), and dir itself.
func TeardownDir(dir, socket, runcRoot, cgroupParent string, bridges, networks []string, logf func(string, ...any)) {
	teardownDir(dir, socket, runcRoot, cgroupParent, bridges, networks, logf)
}

// RemoveCgroup removes parent and its children in every mounted hierarchy.
func RemoveCgroup(parent string) { removeCgroup(parent) }

// KillContainers kills every container of a containerd whose runc root is
// runcRoot (runc delete --force, which also removes their cgroups) and every
// shim bound to socket, and removes those shims' socket files; the state dir
// is where containerd keeps its task bundles. What a power loss does to them.
func KillContainers(state, socket, runcRoot string, logf func(string, ...any)) {
	nsRoot := filepath.Join(runcRoot, "k8s.io")
	runc, _ := exec.LookPath("runc")
	if entries, err := os.ReadDir(nsRoot); err == nil && runc != "" {
		for _, ent := range entries {
			if !ent.IsDir() {
				continue
			}
			if out, err := exec.Command(runc, "--root", nsRoot, "delete", "--force", ent.Name()).CombinedOutput(); err != nil {
				logf("runc delete --force %s: %v: %s", short(ent.Name()), err, bytes.TrimSpace(out))
			}
		}
	}
	sockets := shimSocketFiles(state, socket)
	for _, pid := range pidsWithArg("-address", socket) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			waitGone(pid, 5*time.Second)
		}
	}
	for _, s := range sockets {
		_ = os.Remove(s)
	}
}

// ConflistNetwork is the network a conflist names and the bridges its bridge
// plugins create: what a teardown must remove after it was loaded.
func ConflistNetwork(conf []byte) (network string, bridges []string) {
	f := parseConflist(conf)
	return f.network, f.bridges
}

// CopyExecutable copies src to dst as an executable, atomically (temp file
// and rename), so a runtime never execs a half-written plugin.
func CopyExecutable(src, dst string) error { return copyFile(src, dst) }
