#!/usr/bin/env bash
# hack/crio-setup.sh — build and cache CRI-O for the CRI-O e2e suite (e2e/crio)
# and for anything else that runs a real CRI-O (the stable paths below).
#
# Run as root (apt-get; the suite runs CRI-O). As another user it prints why
# it skips and exits 0. Idempotent: every step checks its stamp and only does
# the missing work. Cache: ${HOSTLEASE_CRIO_CACHE:-/var/cache/hostlease-crio}
#   bin/crio          github.com/cri-o/cri-o/cmd/crio at $CRIO_VERSION (CGO_ENABLED=0,
#                     tags $CRIO_TAGS: no gpgme, btrfs, seccomp or apparmor)
#   bin/pinns         CRI-O's namespace pinning helper (pinns/src, static, same version)
#   bin/.version      stamp: "$CRIO_VERSION $CRIO_TAGS"
#   src/crio          the throwaway wrapper module the build runs in
#   timings.log       how long each build took
# conmon, crun and skopeo come from apt (their paths: `command -v`); runc is
# hack/e2e-setup.sh's. The pause image, the reference CNI plugins and the
# image tool are hack/e2e-setup.sh's cache (the suite reads them there).
# Set HOSTLEASE_CRIO_FORCE=1 to rebuild.
set -euo pipefail

CRIO_MODULE=github.com/cri-o/cri-o
CRIO_VERSION=v1.36.3
# containers_image_openpgp: signatures without gpgme; the others drop cgo
# graph drivers the suite never uses (it runs overlay).
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper"

CACHE=${HOSTLEASE_CRIO_CACHE:-/var/cache/hostlease-crio}
FORCE=${HOSTLEASE_CRIO_FORCE:-0}

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local

log() { printf 'crio-setup: %s\n' "$*"; }
die() { printf 'crio-setup: error: %s\n' "$*" >&2; exit 1; }
timing() { printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$2" >>"$CACHE/timings.log"; }

if [ "$(id -u)" -ne 0 ]; then
	log "skipped: not root (apt-get installs conmon, crun and skopeo; the CRI-O suite runs as root and skips too)"
	exit 0
fi
command -v go >/dev/null || die "go is not on PATH"
mkdir -p "$CACHE/bin" "$CACHE/src"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	log "waiting for another crio-setup.sh to finish"
	flock 9
fi

# ---------------------------------------------------------------- apt packages
# conmon: CRI-O's container monitor; crun: a second OCI runtime CRI-O knows
# (the suite runs runc, as the containerd suites do); skopeo: copies the pause
# archive into the suite's containers-storage (no registry is reachable).
step_apt() {
	local missing=()
	command -v conmon >/dev/null || missing+=(conmon)
	command -v crun >/dev/null || missing+=(crun)
	command -v skopeo >/dev/null || missing+=(skopeo)
	command -v runc >/dev/null || missing+=(runc)
	if [ ${#missing[@]} -eq 0 ]; then
		log "apt: conmon ($(conmon --version | head -n1)), crun, skopeo, runc already installed"
		return
	fi
	log "apt: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
		log "apt: install failed, running apt-get update and retrying"
		apt-get update -q
		apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
}

# ---------------------------------------------------------------- CRI-O
step_crio() {
	local stamp="$CACHE/bin/.version" want="$CRIO_VERSION $CRIO_TAGS"
	if [ "$FORCE" != 1 ] && [ -x "$CACHE/bin/crio" ] && [ -x "$CACHE/bin/pinns" ] &&
		[ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		log "cri-o: cached $CRIO_VERSION: $CACHE/bin/crio, $CACHE/bin/pinns"
		return
	fi
	rm -f "$stamp"
	# A wrapper module: the project's go.mod never requires CRI-O. CRI-O's
	# go.mod has no replace directives, so with CRI-O as the only requirement
	# minimal version selection picks exactly its own dependency versions.
	local w="$CACHE/src/crio"
	rm -rf "$w"
	mkdir -p "$w"
	cat >"$w/go.mod" <<EOF
module hostlease.invalid/criobuild

go 1.26

require $CRIO_MODULE $CRIO_VERSION
EOF
	cat >"$w/tools.go" <<EOF
//go:build tools

package tools

import _ "$CRIO_MODULE/cmd/crio"
EOF
	local src
	src=$(cd "$w" && GOFLAGS=-mod=mod go mod download -json "$CRIO_MODULE@$CRIO_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$src" ] && [ -f "$src/go.mod" ] || die "go mod download $CRIO_MODULE@$CRIO_VERSION gave no source dir"
	(cd "$w" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy)

	local t0=$SECONDS
	log "cri-o: building crio $CRIO_VERSION (CGO_ENABLED=0, tags: $CRIO_TAGS; about 5 min of CPU)"
	(cd "$w" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags "$CRIO_TAGS" -ldflags '-s -w' \
		-o "$CACHE/bin/crio.tmp" "$CRIO_MODULE/cmd/crio")
	mv "$CACHE/bin/crio.tmp" "$CACHE/bin/crio"
	timing crio-build "$((SECONDS - t0))"
	log "cri-o: crio built in $((SECONDS - t0))s: $("$CACHE/bin/crio" --version 2>/dev/null | head -n 1)"

	log "cri-o: building pinns from $src/pinns (static)"
	cc -std=c99 -Os -Wall -Wextra -static -o "$CACHE/bin/pinns.tmp" "$src"/pinns/src/*.c
	mv "$CACHE/bin/pinns.tmp" "$CACHE/bin/pinns"
	echo "$want" >"$stamp"
}

log "cache: $CACHE"
step_apt
step_crio
log "done. crio=$CACHE/bin/crio pinns=$CACHE/bin/pinns conmon=$(command -v conmon) runc=$(command -v runc)"
