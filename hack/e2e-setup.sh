#!/usr/bin/env bash
# hack/e2e-setup.sh — install and build everything the hostlease e2e tests need.
#
# Run as root. Idempotent: every step checks what is already there and only
# does the missing work; results are cached under
#   ${HOSTLEASE_CACHE:-/var/cache/hostlease-e2e}
# Layout of the cache:
#   containerd/<version>/bin/{containerd,containerd-shim-runc-v2,ctr}
#                                             containerd <version>, built from source
#   containerd/<version>/bin/.version         version stamp of those
#   cni-bin/bridge cni-bin/loopback cni-bin/host-local   reference CNI plugins
#   cni-bin/.version                                     version stamp of those
#   pause                                                static pause binary
#   pause.tar                                            image archive (docker-archive), localhost/hostlease/pause:e2e
#   image-tool/                                          hack/image.sh's cached image tool
#   pause.stamp                                          hash of the sources it came from
#   timings.log                                          how long each build took
# A cache from before the version matrix (bin/containerd... with bin/.version)
# is moved to containerd/<that version>/bin the first time that version is set up.
#
# Which containerd versions: CONTAINERD_VERSIONS (space- or comma-separated,
# e.g. "v1.7.35 v2.4.2"), by default every version in
# e2e/harness/containerd-versions.txt (the first one there is the default).
#
#   hack/e2e-setup.sh                   set up (CONTAINERD_VERSIONS or all)
#   hack/e2e-setup.sh --print-versions  print the version list, default first
#   hack/e2e-setup.sh --newest          print the newest 1.7.x, 2.1.x, 2.2.x and 2.x
#                                       the module proxy serves (to refresh the list)
#
# It does NOT build the project's own binaries (make build does).
# Set HOSTLEASE_E2E_FORCE=1 to rebuild everything.
set -euo pipefail

CNI_PLUGINS_MODULE=github.com/containernetworking/plugins
PAUSE_IMAGE=localhost/hostlease/pause:e2e

CACHE=${HOSTLEASE_CACHE:-/var/cache/hostlease-e2e}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FORCE=${HOSTLEASE_E2E_FORCE:-0}

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local

VERSIONS_FILE="$REPO/e2e/harness/containerd-versions.txt"

# all_versions prints the version list, default first.
all_versions() { grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$' "$VERSIONS_FILE"; }

# containerd_module prints the Go module of a containerd version.
containerd_module() {
	case "$1" in
	v1.*) echo github.com/containerd/containerd ;;
	v2.*) echo github.com/containerd/containerd/v2 ;;
	*) return 1 ;;
	esac
}

# newest prints the newest 1.7.x, 2.1.x, 2.2.x and 2.x releases the module
# proxy serves (pre-releases skipped).
newest() {
	local v1 v2
	v1=$(cd /tmp && GOFLAGS=-mod=mod go list -m -versions github.com/containerd/containerd | tr ' ' '\n' | grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$')
	v2=$(cd /tmp && GOFLAGS=-mod=mod go list -m -versions github.com/containerd/containerd/v2 | tr ' ' '\n' | grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$')
	printf '%s\n' "$v1" | grep '^v1\.7\.' | sort -V | tail -n1
	printf '%s\n' "$v2" | grep '^v2\.1\.' | sort -V | tail -n1
	printf '%s\n' "$v2" | grep '^v2\.2\.' | sort -V | tail -n1
	printf '%s\n' "$v2" | sort -V | tail -n1
}

case "${1:-}" in
--print-versions)
	all_versions
	exit 0
	;;
--newest)
	newest
	exit 0
	;;
"") ;;
*)
	echo "usage: $0 [--print-versions | --newest]" >&2
	exit 2
	;;
esac

log() { printf 'e2e-setup: %s\n' "$*"; }
die() { printf 'e2e-setup: error: %s\n' "$*" >&2; exit 1; }
timing() { printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$2" >>"$CACHE/timings.log"; }

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, and the tests run containerd)"
command -v go >/dev/null || die "go is not on PATH"
VERSIONS=$(echo "${CONTAINERD_VERSIONS:-$(all_versions)}" | tr ', ' '\n\n' | sed '/^$/d')
[ -n "$VERSIONS" ] || die "no containerd version selected (CONTAINERD_VERSIONS is empty and $VERSIONS_FILE lists none)"
for v in $VERSIONS; do
	[[ "$v" =~ ^v[12]\.[0-9]+\.[0-9]+$ ]] || die "CONTAINERD_VERSIONS: $v is not a containerd release like v2.1.4 or v1.7.35"
done
mkdir -p "$CACHE/containerd" "$CACHE/cni-bin"
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
# step_containerd VERSION builds containerd, its runc shim and ctr of VERSION
# into $CACHE/containerd/VERSION/bin (unless cached there).
step_containerd() {
	local version=$1 module bin stamp
	module=$(containerd_module "$version")
	bin="$CACHE/containerd/$version/bin"
	stamp="$bin/.version"
	migrate_legacy "$version"
	if [ "$FORCE" != 1 ] && [ -x "$bin/containerd" ] && [ -x "$bin/containerd-shim-runc-v2" ] &&
		[ -x "$bin/ctr" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
		log "containerd $version: cached: $("$bin/containerd" --version)"
		return
	fi
	log "containerd $version: downloading $module@$version into the module cache"
	local dir
	dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$module@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $module@$version did not report a source dir"
	# The module cache is read-only; build in a writable copy so -mod=mod may
	# update go.sum-related state without touching the cache.
	local work
	work=$(mktemp -d /tmp/hostlease-containerd-src.XXXXXX)
	cp -r "$dir/." "$work/"
	chmod -R u+w "$work"
	log "containerd $version: building containerd, containerd-shim-runc-v2, ctr in $work (takes a few minutes on 2 cores)"
	mkdir -p "$bin"
	rm -f "$stamp"
	local t0=$SECONDS rc=0
	(
		cd "$work"
		CGO_ENABLED=0 go build -mod=mod -trimpath -tags "no_btrfs no_devmapper no_zfs" \
			-ldflags "-s -w -X $module/version.Version=$version -X $module/version.Revision=module-cache" \
			-o "$bin/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr
	) || rc=$?
	rm -rf "$work"
	[ "$rc" = 0 ] || die "containerd $version: build failed (exit $rc)"
	local took=$((SECONDS - t0))
	echo "$version" >"$stamp"
	timing "containerd-build $version" "$took"
	log "containerd $version: built in ${took}s: $("$bin/containerd" --version)"
}

# migrate_legacy VERSION moves a containerd build cached by an older version of
# this script ($CACHE/bin, stamped VERSION) to where this one keeps it.
migrate_legacy() {
	local version=$1 old="$CACHE/bin" new="$CACHE/containerd/$1/bin"
	[ "$(cat "$old/.version" 2>/dev/null)" = "$version" ] || return 0
	[ -x "$old/containerd" ] && [ -x "$old/containerd-shim-runc-v2" ] && [ -x "$old/ctr" ] || return 0
	log "containerd $version: moving the build cached in $old to $new"
	mkdir -p "$new"
	mv -f "$old/containerd" "$old/containerd-shim-runc-v2" "$old/ctr" "$new/"
	mv -f "$old/.version" "$new/.version"
	rmdir "$old" 2>/dev/null || true
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
	want=$(cat "$REPO/hack/pause/main.go" "$REPO/hack/image/main.go" "$REPO/hack/image.sh" | sha256sum | cut -d' ' -f1)
	if [ "$FORCE" != 1 ] && [ -s "$CACHE/pause.tar" ] && [ "$(cat "$CACHE/pause.stamp" 2>/dev/null)" = "$want" ]; then
		log "pause: cached: $CACHE/pause.tar ($PAUSE_IMAGE)"
		return
	fi
	log "pause: building static pause binary and image archive $PAUSE_IMAGE (hack/image.sh)"
	(
		cd "$REPO"
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$CACHE/pause" ./hack/pause
		HOSTLEASE_IMAGE_CACHE="$CACHE/image-tool" bash hack/image.sh -name "$PAUSE_IMAGE" -o "$CACHE/pause.tar" \
			-entrypoint /pause "/pause=$CACHE/pause"
	)
	echo "$want" >"$CACHE/pause.stamp"
}

log "cache: $CACHE"
step_apt
for v in $VERSIONS; do
	step_containerd "$v"
done
step_cni
step_pause
log "done. containerd $(echo $VERSIONS) under $CACHE/containerd, cni=$CACHE/cni-bin image=$CACHE/pause.tar"
