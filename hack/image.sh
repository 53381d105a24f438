#!/usr/bin/env bash
# hack/image.sh — build container images from local files, without docker and
# without a shell inside them: runs hack/image/main.go (go-containerregistry),
# built in a throwaway wrapper module (the project's go.mod never requires
# go-containerregistry) and cached.
#
#   hack/image.sh [image flags] /DST=SRC...     see hack/image/main.go
#   hack/image.sh hostlease NAME OUT.tar PLUGIN GC
#       the DaemonSet's image: the distroless-static equivalent base layer,
#       /hostlease (the plugin) and /hostlease-gc, entrypoint /hostlease-gc,
#       cmd run; the CA bundle of Debian's ca-certificates when installed.
#   hack/image.sh --tool
#       build the tool into the cache (if it is not there) and print its path.
#   hack/image.sh hostlease-oci NAME OUT.oci.tar ARCHES PLUGIN GC
#       the same image for each of ARCHES (comma-separated, e.g.
#       amd64,arm64) under one image index, as an OCI archive; {arch} in
#       PLUGIN and GC is replaced by each architecture (make release).
#
# Cache: ${HOSTLEASE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostlease/image}
#   image-<key>   the built tool; <key> hashes this script, the tool's source
#                 and the Go version, so a change to any rebuilds it.
set -euo pipefail

GGCR_MODULE=github.com/google/go-containerregistry
GGCR_VERSION=v0.22.1

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${HOSTLEASE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostlease/image}

log() { printf 'image: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
mkdir -p "$CACHE"
key=$( { cat "${BASH_SOURCE[0]}" "$REPO/hack/image/main.go"; GOTOOLCHAIN=local go env GOVERSION GOARCH; } | sha256sum | cut -c1-16)
tool="$CACHE/image-$key"

if [ ! -x "$tool" ]; then
	exec 9>"$CACHE/.lock"
	flock 9
	if [ ! -x "$tool" ]; then
		log "building the image tool ($GGCR_MODULE $GGCR_VERSION) into $tool"
		w=$(mktemp -d "$CACHE/src.XXXXXX")
		trap 'rm -rf "$w"' EXIT
		printf 'module hostlease.invalid/imagetool\n\ngo 1.25\n' >"$w/go.mod"
		cp "$REPO/hack/image/main.go" "$w/main.go"
		(
			cd "$w"
			export GOFLAGS="-mod=mod -buildvcs=false -tags=hostlease_imagetool" GOTOOLCHAIN=local CGO_ENABLED=0
			go get "$GGCR_MODULE@$GGCR_VERSION" >/dev/null 2>&1 || go get "$GGCR_MODULE@$GGCR_VERSION"
			go mod tidy >/dev/null 2>&1 || go mod tidy
			go vet .
			go build -trimpath -o "$tool.tmp" .
		)
		mv "$tool.tmp" "$tool"
		rm -rf "$w"
		trap - EXIT
	fi
	exec 9>&-
fi

if [ "${1:-}" = --tool ]; then
	echo "$tool"
	exit 0
fi
ca=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	ca=(-ca-certs /etc/ssl/certs/ca-certificates.crt)
fi
if [ "${1:-}" = hostlease ]; then
	[ $# = 5 ] || { log "usage: $0 hostlease NAME OUT.tar PLUGIN GC"; exit 2; }
	exec "$tool" -name "$2" -o "$3" -base "${ca[@]}" -entrypoint /hostlease-gc -cmd run \
		"/hostlease=$4" "/hostlease-gc=$5"
fi
if [ "${1:-}" = hostlease-oci ]; then
	[ $# = 6 ] || { log "usage: $0 hostlease-oci NAME OUT.oci.tar ARCHES PLUGIN GC"; exit 2; }
	exec "$tool" -format oci -arch "$4" -name "$2" -o "$3" -base "${ca[@]}" -entrypoint /hostlease-gc -cmd run \
		"/hostlease=$5" "/hostlease-gc=$6"
fi
exec "$tool" "$@"
