package harness

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
