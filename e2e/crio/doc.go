// Package crio is the CRI-O end-to-end suite (`make e2e-crio`): a real CRI-O
// (hack/crio-setup.sh's build) with conmon and runc, driven through its CRI
// socket, with hostlease as the IPAM of a [bridge(hostlease), failplugin,
// hostlease marker] conflist. Each test runs its own CRI-O: root, runroot,
// socket, config, CNI conf and bin dirs, namespaces dir and logs all live in
// one temp dir; the only host paths touched are libcni's result cache
// (/var/lib/cni/results, files of the test's own network), the test's bridge
// and its cgroup parent, all removed by the test's cleanup.
//
// The tests are in the _test files; this file only documents the package.
package crio
