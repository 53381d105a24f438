#!/usr/bin/env bash
# hack/multus-setup.sh — build and cache Multus's thin plugin and its
# NetworkAttachmentDefinition CRD for the real-node suite (e2e/k8s,
# TestMultus). The thick plugin (multus-shim, multus-daemon) is not built: no
# test runs it.
#
# Run as root. Idempotent (one stamp for the whole cache) and flock'ed:
# concurrent callers wait for one build.
# Cache: ${HOSTLEASE_MULTUS_CACHE:-/var/cache/hostlease-multus}
#   bin/multus         the thin plugin (cmd/multus) at $MULTUS_VERSION
#   crd.yaml           the NetworkAttachmentDefinition CRD, the first
#                      CustomResourceDefinition document of the module's own
#                      deployments/multus-daemonset.yml, unchanged
#   version            stamp ($MULTUS_VERSION)
#   src/multus/        the throwaway wrapper module it is built in
# The build runs in that wrapper module, from the Go module proxy: the
# project's go.mod never requires Multus. The proxy refuses the module's
# version list, so the version is always exact. Prints the cache dir last.
# Set HOSTLEASE_MULTUS_FORCE=1 to rebuild.
set -euo pipefail

MULTUS_MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
MULTUS_VERSION=v4.3.0
CMDS=(multus)

CACHE=${HOSTLEASE_MULTUS_CACHE:-/var/cache/hostlease-multus}
FORCE=${HOSTLEASE_MULTUS_FORCE:-0}

export GOFLAGS=-buildvcs=false
export GOTOOLCHAIN=local
export CGO_ENABLED=0

log() { printf 'multus-setup: %s\n' "$*" >&2; }
die() { printf 'multus-setup: error: %s\n' "$*" >&2; exit 1; }

cached() {
	local c
	for c in "${CMDS[@]}"; do [ -x "$CACHE/bin/$c" ] || return 1; done
	[ -s "$CACHE/crd.yaml" ] && [ "$(cat "$CACHE/version" 2>/dev/null)" = "$MULTUS_VERSION" ]
}

if [ "$FORCE" != 1 ] && cached; then
	log "cached $MULTUS_VERSION in $CACHE"
	echo "$CACHE"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || die "Multus $MULTUS_VERSION is not built in $CACHE and building it needs root (run: sudo bash hack/multus-setup.sh)"
command -v go >/dev/null || die "go is not on PATH"
mkdir -p "$CACHE/bin" "$CACHE/src"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
	log "waiting for another multus-setup.sh to finish"
	flock 9
fi
if [ "$FORCE" != 1 ] && cached; then
	log "cached $MULTUS_VERSION in $CACHE"
	echo "$CACHE"
	exit 0
fi
rm -f "$CACHE/version"

w="$CACHE/src/multus"
rm -rf "$w"
mkdir -p "$w"
cat >"$w/go.mod" <<EOT
module hostlease.invalid/multusbuild

go 1.26
EOT
{
	echo "//go:build tools"
	echo
	echo "package tools"
	echo
	echo "import ("
	for c in "${CMDS[@]}"; do echo "	_ \"$MULTUS_MODULE/cmd/$c\""; done
	echo ")"
} >"$w/tools.go"
t0=$SECONDS
log "downloading $MULTUS_MODULE@$MULTUS_VERSION"
mdir=$(cd "$w" && go mod download -json "$MULTUS_MODULE@$MULTUS_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[ -n "$mdir" ] && [ -f "$mdir/go.mod" ] || die "go mod download $MULTUS_MODULE@$MULTUS_VERSION gave no source dir"

# The CRD: the document of the module's quickstart manifest whose kind is
# CustomResourceDefinition, byte for byte.
manifest="$mdir/deployments/multus-daemonset.yml"
[ -f "$manifest" ] || die "$manifest is missing from the module"
awk '
	/^---[[:space:]]*$/ { if (crd) { found = 1; exit } doc = ""; next }
	{ doc = doc $0 "\n" }
	/^kind: CustomResourceDefinition[[:space:]]*$/ { crd = 1 }
	END { if (crd && !found) found = 1; if (found) printf "%s", doc; else exit 1 }
' "$manifest" >"$CACHE/crd.yaml.tmp" || die "no CustomResourceDefinition in $manifest"
grep -q '^  name: network-attachment-definitions.k8s.cni.cncf.io$' "$CACHE/crd.yaml.tmp" ||
	die "the CustomResourceDefinition in $manifest is not network-attachment-definitions.k8s.cni.cncf.io"
mv "$CACHE/crd.yaml.tmp" "$CACHE/crd.yaml"

(
	cd "$w"
	GOFLAGS=-mod=mod go get "$MULTUS_MODULE@$MULTUS_VERSION"
	GOFLAGS=-mod=mod go mod tidy
	for c in "${CMDS[@]}"; do
		log "building $c"
		GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X $MULTUS_MODULE/pkg/multus.version=$MULTUS_VERSION" \
			-o "$CACHE/bin/$c.tmp" "$MULTUS_MODULE/cmd/$c"
		mv "$CACHE/bin/$c.tmp" "$CACHE/bin/$c"
	done
)
echo "$MULTUS_VERSION" >"$CACHE/version"
log "built $MULTUS_VERSION in $((SECONDS - t0))s"
echo "$CACHE"
