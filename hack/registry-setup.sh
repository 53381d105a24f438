#!/usr/bin/env bash
# hack/registry-setup.sh — the tools of README's Quick start that the real-node
# suite runs as written (e2e/k8s, TestQuickStartHelm): crane (go-containerregistry,
# for `crane push`, `crane digest` and `crane registry serve`, the suite's
# registry on loopback) and skopeo (Debian's package).
#
#   hack/registry-setup.sh          build/install what is missing; print the
#                                   directory holding crane and skopeo last
#   hack/registry-setup.sh --path   print that directory if everything is
#                                   there, else fail saying what to run
#                                   (never builds: the tests call this)
#
# Cache: ${HOSTLEASE_REGISTRY_CACHE:-/var/cache/hostlease-registry}
#   crane-<key>   cmd/crane of $GGCR_MODULE at $GGCR_VERSION, built in a
#                 throwaway wrapper module (the project's go.mod never requires
#                 go-containerregistry); <key> hashes this script and the Go
#                 version, so a change to either rebuilds it
#   bin/          links: crane -> ../crane-<key>, skopeo -> skopeo's path
# Building and apt-get need root; flock'ed: concurrent callers wait for one.
set -euo pipefail

GGCR_MODULE=github.com/google/go-containerregistry
GGCR_VERSION=v0.22.1

CACHE=${HOSTLEASE_REGISTRY_CACHE:-/var/cache/hostlease-registry}

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local
export CGO_ENABLED=0

log() { printf 'registry-setup: %s\n' "$*" >&2; }
die() { printf 'registry-setup: error: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH"
key=$( { cat "${BASH_SOURCE[0]}"; go env GOVERSION GOARCH; } | sha256sum | cut -c1-16)
crane=$CACHE/crane-$key

ready() {
	[ -x "$crane" ] && [ "$(readlink "$CACHE/bin/crane" 2>/dev/null)" = "../crane-$key" ] &&
		[ -x "$CACHE/bin/skopeo" ]
}

if [ "${1:-}" = --path ]; then
	ready || die "crane or skopeo missing in $CACHE/bin: run (as root) bash hack/registry-setup.sh, or make setup"
	echo "$CACHE/bin"
	exit 0
fi
[ $# = 0 ] || die "usage: $0 [--path]"
if ready; then
	log "cached: crane $GGCR_VERSION, $("$CACHE/bin/skopeo" --version)"
	echo "$CACHE/bin"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || die "crane/skopeo are not in $CACHE and installing them needs root (run: sudo bash hack/registry-setup.sh)"
mkdir -p "$CACHE/bin"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	log "waiting for another registry-setup.sh to finish"
	flock 9
fi

if ! command -v skopeo >/dev/null; then
	log "apt-get install skopeo"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends skopeo >/dev/null ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends skopeo >/dev/null; } ||
		die "apt-get install skopeo failed"
fi
ln -sfn "$(command -v skopeo)" "$CACHE/bin/skopeo"

if [ ! -x "$crane" ]; then
	t0=$SECONDS
	log "building $GGCR_MODULE/cmd/crane@$GGCR_VERSION into $crane"
	w=$(mktemp -d "$CACHE/src.XXXXXX")
	trap 'rm -rf "$w"' EXIT
	printf 'module hostlease.invalid/cranebuild\n\ngo 1.26\n' >"$w/go.mod"
	printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/crane"\n' "$GGCR_MODULE" >"$w/tools.go"
	(
		cd "$w"
		export GOFLAGS="-mod=mod -buildvcs=false"
		go get "$GGCR_MODULE@$GGCR_VERSION" >/dev/null 2>&1 || go get "$GGCR_MODULE@$GGCR_VERSION"
		go mod tidy >/dev/null 2>&1 || go mod tidy
		go build -trimpath -ldflags "-s -w" -o "$crane.tmp" "$GGCR_MODULE/cmd/crane"
	)
	mv "$crane.tmp" "$crane"
	rm -rf "$w"
	trap - EXIT
	log "built crane in $((SECONDS - t0))s"
fi
ln -sfn "../crane-$key" "$CACHE/bin/crane"
# Older builds of this script are not used any more.
find "$CACHE" -maxdepth 1 -name 'crane-*' ! -name "crane-$key" -delete
log "ready: $("$CACHE/bin/crane" version 2>/dev/null || echo crane), $("$CACHE/bin/skopeo" --version)"
echo "$CACHE/bin"
