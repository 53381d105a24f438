#!/usr/bin/env bash
# hack/helm-setup.sh — build and cache the real Helm v3 CLI for the chart's
# tests (deploy/ renders and lints deploy/helm/hostlease with it; e2e/k8s
# installs, upgrades, rolls back and uninstalls it on the real node).
#
# Run as root. Idempotent (a stamp per build) and flock'ed: concurrent callers
# wait for one build. Cache: ${HOSTLEASE_HELM_CACHE:-/var/cache/hostlease-helm}
#   bin/helm           helm.sh/helm/v3/cmd/helm at $HELM_VERSION
#   bin/helm.version   stamp
#   src/helm/          the throwaway wrapper module it is built in
# The build runs in that wrapper module, from the Go module proxy: the
# project's go.mod never requires helm.sh/helm. Prints the binary's path last.
# Set HOSTLEASE_HELM_FORCE=1 to rebuild.
set -euo pipefail

HELM_MODULE=helm.sh/helm/v3
HELM_VERSION=v3.22.0

CACHE=${HOSTLEASE_HELM_CACHE:-/var/cache/hostlease-helm}
FORCE=${HOSTLEASE_HELM_FORCE:-0}
BIN=$CACHE/bin/helm

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local
export CGO_ENABLED=0

log() { printf 'helm-setup: %s\n' "$*" >&2; }
die() { printf 'helm-setup: error: %s\n' "$*" >&2; exit 1; }

cached() { [ -x "$BIN" ] && [ "$(cat "$BIN.version" 2>/dev/null)" = "$HELM_VERSION" ]; }

if [ "$FORCE" != 1 ] && cached; then
	echo "$BIN"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || die "helm $HELM_VERSION is not built in $CACHE and building it needs root (run: sudo bash hack/helm-setup.sh)"
command -v go >/dev/null || die "go is not on PATH"
mkdir -p "$CACHE/bin" "$CACHE/src"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	log "waiting for another helm-setup.sh to finish"
	flock 9
fi
if [ "$FORCE" != 1 ] && cached; then
	echo "$BIN"
	exit 0
fi

w="$CACHE/src/helm"
rm -rf "$w"
mkdir -p "$w"
cat >"$w/go.mod" <<EOF
module hostlease.invalid/helmbuild

go 1.26
EOF
cat >"$w/tools.go" <<EOF
//go:build tools

package tools

import _ "$HELM_MODULE/cmd/helm"
EOF
log "building $HELM_MODULE@$HELM_VERSION"
t0=$SECONDS
(
	cd "$w"
	GOFLAGS=-mod=mod go get "$HELM_MODULE@$HELM_VERSION"
	# As helm's own Makefile: the Kubernetes version helm template and lint
	# assume (.Capabilities.KubeVersion) is that of the client-go it is built
	# with, not the 1.20 compiled in as a fallback.
	kv=$(GOFLAGS=-mod=mod go list -m -f '{{.Version}}' k8s.io/client-go)
	minor=$(echo "$kv" | cut -d. -f2)
	[ -n "$minor" ] || die "cannot tell the Kubernetes version from k8s.io/client-go $kv"
	ld="-s -w -X $HELM_MODULE/internal/version.version=$HELM_VERSION"
	for p in pkg/chartutil pkg/lint/rules; do
		ld="$ld -X $HELM_MODULE/$p.k8sVersionMajor=1 -X $HELM_MODULE/$p.k8sVersionMinor=$minor"
	done
	GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$BIN.tmp" "$HELM_MODULE/cmd/helm"
)
mv "$BIN.tmp" "$BIN"
echo "$HELM_VERSION" >"$BIN.version"
log "built $("$BIN" version --short) in $((SECONDS - t0))s"
echo "$BIN"
