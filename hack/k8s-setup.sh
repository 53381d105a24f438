#!/usr/bin/env bash
# hack/k8s-setup.sh — build and cache a real single-node Kubernetes for e2e/k8s.
#
# Run as root. Idempotent: each step checks its stamp and only does missing work.
# Cache: ${HOSTLEASE_K8S_CACHE:-/var/cache/hostlease-k8s}
#   bin/etcd                                 go.etcd.io/etcd/server/v3 at $ETCD_VERSION
#   bin/etcd.version                         stamp
#   bin/kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
#   bin/kube.version                         stamp ($K8S_VERSION)
#   timings.log                              how long each build took
#   e2e/                                     hack/e2e-setup.sh's cache for this suite
# The builds run in throwaway wrapper modules under $CACHE/src: the project's go.mod
# never requires k8s.io/kubernetes. containerd, the CNI plugins and the pause image
# come from hack/e2e-setup.sh (run first, same containerd as e2e/).
# Set HOSTLEASE_K8S_FORCE=1 to rebuild everything.
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_MODULE=go.etcd.io/etcd/server/v3
ETCD_VERSION=v3.7.3
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

CACHE=${HOSTLEASE_K8S_CACHE:-/var/cache/hostlease-k8s}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FORCE=${HOSTLEASE_K8S_FORCE:-0}

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local
export CGO_ENABLED=0

log() { printf 'k8s-setup: %s\n' "$*"; }
die() { printf 'k8s-setup: error: %s\n' "$*" >&2; exit 1; }
timing() { printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$2" >>"$CACHE/timings.log"; }

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, and the tests run a kubelet)"
command -v go >/dev/null || die "go is not on PATH"
mkdir -p "$CACHE/bin" "$CACHE/src"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	log "waiting for another k8s-setup.sh to finish"
	flock 9
fi

# ---------------------------------------------------------------- e2e base
# containerd, runc, CNI plugins, pause image (and the image tool): what e2e/ uses, built by the same
# script into a cache of our own ($HOSTLEASE_CACHE, default $CACHE/e2e; e2e/k8s
# uses the same), so a rebuild of the shared e2e cache never pulls binaries
# from under a running node. Only the containerd the node runs
# ($CONTAINERD_VERSION, default the e2e default): each version is a 4-5 min
# build on 2 cores, and e2e/ builds the others into its own cache.
step_e2e() {
	local v=${CONTAINERD_VERSION:-$(bash "$REPO/hack/e2e-setup.sh" --print-versions | head -n 1)}
	HOSTLEASE_CACHE=${HOSTLEASE_CACHE:-$CACHE/e2e} CONTAINERD_VERSIONS=$v bash "$REPO/hack/e2e-setup.sh"
}

# ---------------------------------------------------------------- etcd
step_etcd() {
	if [ "$FORCE" != 1 ] && [ -x "$CACHE/bin/etcd" ] && [ "$(cat "$CACHE/bin/etcd.version" 2>/dev/null)" = "$ETCD_VERSION" ]; then
		log "etcd: cached $ETCD_VERSION"
		return
	fi
	local w="$CACHE/src/etcd"
	rm -rf "$w"
	mkdir -p "$w"
	cat >"$w/go.mod" <<EOF
module hostlease.invalid/etcdbuild

go 1.24
EOF
	cat >"$w/tools.go" <<EOF
//go:build tools

package tools

import _ "$ETCD_MODULE"
EOF
	log "etcd: building $ETCD_MODULE@$ETCD_VERSION"
	local t0=$SECONDS
	(
		cd "$w"
		GOFLAGS=-mod=mod go get "$ETCD_MODULE@$ETCD_VERSION"
		GOFLAGS=-mod=mod go build -trimpath -ldflags '-s -w' -o "$CACHE/bin/etcd" "$ETCD_MODULE"
	)
	echo "$ETCD_VERSION" >"$CACHE/bin/etcd.version"
	timing etcd-build "$((SECONDS - t0))"
	log "etcd: built in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- kubernetes
step_kube() {
	local ok=1 c
	for c in "${KUBE_CMDS[@]}"; do [ -x "$CACHE/bin/$c" ] || ok=0; done
	if [ "$FORCE" != 1 ] && [ $ok = 1 ] && [ "$(cat "$CACHE/bin/kube.version" 2>/dev/null)" = "$K8S_VERSION" ]; then
		log "kubernetes: cached $K8S_VERSION"
		return
	fi
	local w="$CACHE/src/kube"
	rm -rf "$w"
	mkdir -p "$w"
	local kdir
	kdir=$(cd "$w" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$kdir" ] && [ -f "$kdir/go.mod" ] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no source dir"
	# Staging modules are required at v0.0.0 and replaced by ./staging/... in
	# kubernetes' own go.mod; outside it they resolve to the published v0.<minor>.<patch>.
	local staging_ver="v0.${K8S_VERSION#v1.}"
	{
		echo "module hostlease.invalid/kubebuild"
		echo
		echo "go 1.24"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/.*#replace \1 => \1 '"$staging_ver"'#p' "$kdir/go.mod"
	} >"$w/go.mod"
	grep -q '^replace k8s.io/api ' "$w/go.mod" || die "no staging replaces found in $kdir/go.mod"
	{
		echo "//go:build tools"
		echo
		echo "package tools"
		echo
		echo "import ("
		for c in "${KUBE_CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
		echo ")"
	} >"$w/tools.go"
	(cd "$w" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy)
	local pkg=k8s.io/component-base/version
	local ld
	ld="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
	# One command at a time: the apiserver compiles most shared packages first.
	for c in "${KUBE_CMDS[@]}"; do
		local t0=$SECONDS
		log "kubernetes: building $c $K8S_VERSION"
		(cd "$w" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$CACHE/bin/$c.tmp" "k8s.io/kubernetes/cmd/$c")
		mv "$CACHE/bin/$c.tmp" "$CACHE/bin/$c"
		timing "$c-build" "$((SECONDS - t0))"
		log "kubernetes: $c built in $((SECONDS - t0))s"
	done
	echo "$K8S_VERSION" >"$CACHE/bin/kube.version"
}

T0=$SECONDS
log "cache: $CACHE"
step_e2e
step_etcd
step_kube
log "done in $((SECONDS - T0))s. bin=$CACHE/bin"
