#!/usr/bin/env bash
# hack/setup.sh — `make setup`: build every tool `make test` needs, before any
# suite starts, one after the other, each with its own progress line and its
# own cache (each step is idempotent: a cached tool costs a stamp check).
#
#   1. containerd (every version in e2e/harness/containerd-versions.txt), the
#      reference CNI plugins, the pause image and its image tool (hack/e2e-setup.sh)
#   2. Kubernetes, etcd and the real node's containerd (hack/k8s-setup.sh)
#   3. CRI-O and pinns, conmon, crun and skopeo (hack/crio-setup.sh)
#   4. Multus and its NetworkAttachmentDefinition CRD (hack/multus-setup.sh)
#   5. helm (hack/helm-setup.sh)
#   6. promtool (hack/install-promtool.sh, Debian's package)
#   7. the image tool in the cache the deploy tests use (hack/image.sh --tool)
#   8. the Go build cache of every test binary and of every binary the tests
#      build in their TestMain (so no suite compiles while another runs)
#   9. the release's artefacts once, into bin/make-test-release (make
#      release: the arm64 cross-build, the chart package, the multi-arch
#      image): hack/test.sh hands it to deploy/release_test.go (as the
#      release its own build must equal, byte for byte) and to the real-node
#      suite (the release README's Quick start installs), once it has checked
#      that it is a release of the tree under test
#  10. crane and skopeo, the registry tools of README's Quick start that
#      e2e/k8s runs as written (hack/registry-setup.sh)
#
# Nothing here runs a test. Root is needed for 1-6, 9 and 10 (apt-get, caches
# under /var/cache); as another user the steps that need root are skipped
# with a line that says so (the suites that need them skip too).
# Each step's own output is streamed, indented; its time goes to stdout and
# to /var/cache/hostlease-setup.log (root only).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export GOFLAGS=${GOFLAGS:--buildvcs=false}

root=0
[ "$(id -u)" = 0 ] && root=1
T0=$SECONDS
rc=0
N=10 # steps
step() { # step N NAME CMD...: CMD's output streamed, indented
	local n=$1 name=$2 t0=$SECONDS
	shift 2
	echo "setup: [$n/$N] $name ..."
	if "$@" 2>&1 | sed -u 's/^/    /'; [ "${PIPESTATUS[0]}" = 0 ]; then
		echo "setup: [$n/$N] $name: ok in $((SECONDS - t0))s"
	else
		echo "setup: [$n/$N] $name: FAILED after $((SECONDS - t0))s"
		rc=1
	fi
	[ "$root" = 1 ] && printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" "$((SECONDS - t0))" >>/var/cache/hostlease-setup.log
	return 0
}
needs_root() { echo "setup: [$1/$N] $2: skipped: not root (the suites that need it skip too)"; }

if [ "$root" = 1 ]; then
	step 1 "containerd, CNI plugins, pause image" bash hack/e2e-setup.sh
	step 2 "Kubernetes, etcd, the node's containerd" bash hack/k8s-setup.sh
	step 3 "CRI-O, pinns, conmon" bash hack/crio-setup.sh
	step 4 "Multus" bash hack/multus-setup.sh
	step 5 "helm" bash hack/helm-setup.sh
	step 6 "promtool" bash hack/install-promtool.sh
else
	needs_root 1 "containerd, CNI plugins, pause image"
	needs_root 2 "Kubernetes, etcd, the node's containerd"
	needs_root 3 "CRI-O, pinns, conmon"
	needs_root 4 "Multus"
	needs_root 5 "helm"
	needs_root 6 "promtool"
fi
step 7 "image tool (deploy tests' cache)" bash hack/image.sh --tool

# The test binaries (-race for the unit and integration packages, as `make
# unit` runs them; plain for e2e) are compiled and "run" with /bin/true, which
# fills the build cache and runs nothing; then the binaries the TestMains
# build, and cnitool as test/integration installs it.
warm_go() {
	local unit
	unit=$($GO list ./... | grep -v -e /e2e) || return 1
	CGO_ENABLED=1 $GO test -race -count=1 -exec /bin/true $unit >/dev/null || return 1
	$GO test -count=1 -exec /bin/true ./e2e/... >/dev/null || return 1
	CGO_ENABLED=0 $GO build -o /dev/null ./cmd/ipam && CGO_ENABLED=0 $GO build -o /dev/null ./cmd/ipam-gc || return 1
	CGO_ENABLED=0 $GO build ./e2e/failplugin \
		github.com/containernetworking/plugins/plugins/ipam/host-local \
		github.com/containernetworking/plugins/plugins/main/bridge \
		github.com/containernetworking/plugins/plugins/main/loopback || return 1
	local d v
	d=$(mktemp -d /tmp/hostlease-setup-cnitool.XXXXXX)
	v=$($GO list -m -f '{{.Version}}' github.com/containernetworking/cni) &&
		GOBIN=$d GOFLAGS= CGO_ENABLED=0 $GO install -buildvcs=false github.com/containernetworking/cni/cnitool@"$v"
	local r=$?
	rm -rf "$d"
	return $r
}
step 8 "Go build cache of the tests" warm_go
release_once() {
	local stamp
	rm -rf bin/make-test-release bin/make-test-release.tree
	stamp=$(bash hack/tree-stamp.sh) &&
		mkdir -p bin && make --no-print-directory release DIST=bin/make-test-release &&
		echo "$stamp" >bin/make-test-release.tree
}
if [ "$root" = 1 ]; then
	step 9 "release artefacts (cross-built binaries, chart, image)" release_once
else
	needs_root 9 "release artefacts (helm is built as root)"
fi

if [ "$root" = 1 ]; then
	step 10 "crane and skopeo (README's Quick start)" bash hack/registry-setup.sh
else
	needs_root 10 "crane and skopeo (README's Quick start)"
fi

echo "setup: $([ "$rc" = 0 ] && echo done || echo FAILED) in $((SECONDS - T0))s"
exit $rc
