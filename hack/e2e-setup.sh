#!/usr/bin/env bash
# hack/e2e-setup.sh — install and build everything the hostlease e2e tests need.
#
# Run as root. Idempotent: every step checks what is already there and only
# does the missing work; results are cached under
#   ${HOSTLEASE_CACHE:-/var/cache/hostlease-e2e}
# Layout of the cache:
#   bin/containerd bin/containerd-shim-runc-v2 bin/ctr   containerd (built from source)
#   bin/.version                                         version stamp of those
#   cni-bin/bridge cni-bin/loopback cni-bin/host-local   reference CNI plugins
#   cni-bin/.version                                     version stamp of those
#   pause                                                static pause binary
#   pause.tar                                            OCI archive, localhost/hostlease/pause:e2e
#   pause.stamp                                          hash of the sources it came from
#   timings.log                                          how long each build took
#
# It does NOT build the project's own binaries (make build does).
# Set HOSTLEASE_E2E_FORCE=1 to rebuild everything.
set -euo pipefail

CONTAINERD_MODULE=github.com/containerd/containerd/v2
CONTAINERD_VERSION=v2.1.4
CNI_PLUGINS_MODULE=github.com/containernetworking/plugins
PAUSE_IMAGE=localhost/hostlease/pause:e2e

CACHE=${HOSTLEASE_CACHE:-/var/cache/hostlease-e2e}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FORCE=${HOSTLEASE_E2E_FORCE:-0}

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local

log() { printf 'e2e-setup: %s\n' "$*"; }
die() { printf 'e2e-setup: error: %s\n' "$*" >&2; exit 1; }
timing() { printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$2" >>"$CACHE/timings.log"; }

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, and the tests run containerd)"
command -v go >/dev/null || die "go is not on PATH"
mkdir -p "$CACHE/bin" "$CACHE/cni-bin"
# One setup at a time (test packages run in parallel and may all call us).
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	log "waiting for another e2e-setup.sh to finish"
	flock 9
fi

# ---------------------------------------------------------------- apt packages
# runc is the OCI runtime containerd's shim execs; iproute2 gives `ip` (netns,
# bridges) used by the harness cleanup. apt-get update runs only when a
# package is missing and the install fails without it.
step_apt() {
	local missing=()
	command -v runc >/dev/null || missing+=(runc)
	command -v ip >/dev/null || missing+=(iproute2)
	if [ ${#missing[@]} -eq 0 ]; then
		log "apt: runc ($(runc --version | head -n1)) and iproute2 already installed"
		return
	fi
	log "apt: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q "${missing[@]}"; then
		log "apt: install failed, running apt-get update and retrying"
		apt-get update -q
		apt-get install -y -q "${missing[@]}"
	fi
}

# ---------------------------------------------------------------- containerd
step_containerd() {
	local stamp="$CACHE/bin/.version"
	if [ "$FORCE" != 1 ] && [ -x "$CACHE/bin/containerd" ] && [ -x "$CACHE/bin/containerd-shim-runc-v2" ] &&
		[ -x "$CACHE/bin/ctr" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$CONTAINERD_VERSION" ]; then
		log "containerd: cached: $("$CACHE/bin/containerd" --version)"
		return
	fi
	log "containerd: downloading $CONTAINERD_MODULE@$CONTAINERD_VERSION into the module cache"
	local dir
	dir=$(go mod download -json "$CONTAINERD_MODULE@$CONTAINERD_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$dir" ] && [ -d "$dir" ] || die "go mod download did not report a source dir"
	# The module cache is read-only; build in a writable copy so -mod=mod may
	# update go.sum-related state without touching the cache.
	local work
	work=$(mktemp -d /tmp/hostlease-containerd-src.XXXXXX)
	trap 'rm -rf "$work"' RETURN
	cp -r "$dir/." "$work/"
	chmod -R u+w "$work"
	log "containerd: building containerd, containerd-shim-runc-v2, ctr in $work (takes a few minutes on 2 cores)"
	local t0=$SECONDS
	(
		cd "$work"
		CGO_ENABLED=0 go build -mod=mod -trimpath -tags "no_btrfs no_devmapper no_zfs" \
			-ldflags "-s -w -X $CONTAINERD_MODULE/version.Version=$CONTAINERD_VERSION -X $CONTAINERD_MODULE/version.Revision=module-cache" \
			-o "$CACHE/bin/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr
	)
	local took=$((SECONDS - t0))
	echo "$CONTAINERD_VERSION" >"$stamp"
	timing "containerd-build" "$took"
	log "containerd: built in ${took}s: $("$CACHE/bin/containerd" --version)"
}

# ---------------------------------------------------------------- CNI plugins
step_cni() {
	local version stamp="$CACHE/cni-bin/.version"
	version=$(cd "$REPO" && go list -m -f '{{.Version}}' "$CNI_PLUGINS_MODULE")
	if [ "$FORCE" != 1 ] && [ -x "$CACHE/cni-bin/bridge" ] && [ -x "$CACHE/cni-bin/loopback" ] &&
		[ -x "$CACHE/cni-bin/host-local" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
		log "cni: cached: bridge, loopback, host-local $version"
		return
	fi
	log "cni: building bridge, loopback, host-local $version (pinned in go.mod)"
	local t0=$SECONDS
	(
		cd "$REPO"
		CGO_ENABLED=0 go build -trimpath -o "$CACHE/cni-bin/" \
			"$CNI_PLUGINS_MODULE/plugins/main/bridge" \
			"$CNI_PLUGINS_MODULE/plugins/main/loopback" \
			"$CNI_PLUGINS_MODULE/plugins/ipam/host-local"
	)
	echo "$version" >"$stamp"
	timing "cni-build" "$((SECONDS - t0))"
	log "cni: built in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- pause image
step_pause() {
	local want
	want=$(cat "$REPO/hack/pause/main.go" "$REPO/hack/ociimage/main.go" | sha256sum | cut -d' ' -f1)
	if [ "$FORCE" != 1 ] && [ -s "$CACHE/pause.tar" ] && [ "$(cat "$CACHE/pause.stamp" 2>/dev/null)" = "$want" ]; then
		log "pause: cached: $CACHE/pause.tar ($PAUSE_IMAGE)"
		return
	fi
	log "pause: building static pause binary and OCI archive $PAUSE_IMAGE"
	(
		cd "$REPO"
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$CACHE/pause" ./hack/pause
		go run ./hack/ociimage -binary "$CACHE/pause" -name "$PAUSE_IMAGE" -o "$CACHE/pause.tar"
	)
	echo "$want" >"$CACHE/pause.stamp"
}

log "cache: $CACHE"
step_apt
step_containerd
step_cni
step_pause
log "done. containerd=$CACHE/bin cni=$CACHE/cni-bin image=$CACHE/pause.tar"
