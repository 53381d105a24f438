#!/usr/bin/env bash
# hack/release.sh — write a release's artefacts into one directory (make
# release; deploy/release_test.go runs it and checks every artefact).
#
#   DIST=dist VERSION=<git describe> bash hack/release.sh
#   bash hack/release.sh --semver <describe>    print the chart version only
#
# Into $DIST (default dist/), for version V (default: git describe --tags
# --match 'v[0-9]*' --always --dirty, as the Makefile's VERSION) and the
# chart version S (SemVer, below):
#   hostlease-V-linux-amd64.tar.gz   hostlease-V-linux-<arch>/{hostlease,
#   hostlease-V-linux-arm64.tar.gz     hostlease-gc,LICENSE,README.md}: static
#                                      binaries (CGO_ENABLED=0, -trimpath)
#   hostlease-V-image.oci.tar        the DaemonSet's image for both
#                                      architectures under one index, tagged
#                                      $IMAGE:V (hack/image.sh hostlease-oci)
#   hostlease-S.tgz                  the chart (helm package --version S
#                                      --app-version V: its image tag
#                                      defaults to V)
#   hostlease-V.yaml                 kustomize build of deploy/base with the
#                                      image set to $IMAGE:V
#   sha256sums                       of the files above (sha256sum -c)
# Other files in $DIST are left alone and not listed.
#
# Chart version (Helm requires SemVer), from the describe string D:
#   vX.Y.Z[-PRE]              -> X.Y.Z[-PRE]
#   vX.Y.Z[-PRE]-N-gHASH      -> X.Y.Z[-PRE]+N.gHASH   (commits after a tag:
#                                build metadata, the tag's precedence)
#   HASH (no v-tag)           -> 0.0.0-gHASH
#   a -dirty suffix           -> .dirty appended to the build metadata
#                                (+dirty when there is none)
# Anything else is refused (set CHART_VERSION).
#
# Reproducible: the same commit and toolchain give the same bytes (binaries
# built with -trimpath and no VCS stamp; tarballs sorted, every time the
# epoch, owners 0:0, gzip without a name or time; the image as hack/image.sh
# guarantees; the chart re-packed the same way, since helm stamps the time
# of packaging into its tar headers).
set -euo pipefail

log() { printf 'release: %s\n' "$*" >&2; }
die() { printf 'release: error: %s\n' "$*" >&2; exit 1; }

# semver D: the chart version for describe string D (rule above).
semver() {
	local d=$1 dirty= core='(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)' pre='(-[0-9A-Za-z.-]+)?'
	if [[ $d == *-dirty ]]; then
		dirty=1
		d=${d%-dirty}
	fi
	if [[ $d =~ ^v($core$pre)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		echo "${BASH_REMATCH[1]}+${BASH_REMATCH[6]}.g${BASH_REMATCH[7]}${dirty:+.dirty}"
	elif [[ $d =~ ^v($core$pre)$ ]]; then
		echo "${BASH_REMATCH[1]}${dirty:++dirty}"
	elif [[ $d =~ ^[0-9a-f]{4,40}$ ]]; then
		echo "0.0.0-g$d${dirty:++dirty}"
	else
		return 1
	fi
}

if [ "${1:-}" = --semver ]; then
	[ $# = 2 ] || die "usage: $0 --semver DESCRIBE"
	semver "$2" || die "$2: not vX.Y.Z[-PRE][-N-gHASH][-dirty] nor HASH[-dirty]"
	exit 0
fi
[ $# = 0 ] || die "usage: DIST=dir VERSION=v $0 (or --semver DESCRIBE)"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || true)}
[ -n "$VERSION" ] || die "no VERSION and git describe says nothing"
CHART_VERSION=${CHART_VERSION:-$(semver "$VERSION")} ||
	die "VERSION $VERSION does not map to a SemVer chart version (see the rule in $0); set CHART_VERSION"
DIST=${DIST:-dist}
IMAGE=${IMAGE:-ghcr.io/hostlease/hostlease}
ARCHES=${ARCHES:-amd64 arm64}
LDFLAGS=${LDFLAGS:--s -w -X main.buildVersion=$VERSION -X github.com/hostlease/hostlease/pkg/daemon.Version=$VERSION}
export CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--buildvcs=false} GOTOOLCHAIN=${GOTOOLCHAIN:-local}

mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
work=$(mktemp -d "$DIST/.release.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$SECONDS

# deterministic_tgz OUT DIR NAME: DIR/NAME as a reproducible .tar.gz.
deterministic_tgz() {
	tar -C "$2" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
		--mode='u+rwX,go+rX,go-w' --format=pax --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-cf - "$3" | gzip -n >"$1"
}

files=()
for arch in $ARCHES; do
	name=hostlease-$VERSION-linux-$arch
	out=$work/linux-$arch
	mkdir -p "$out/$name"
	log "building linux/$arch"
	GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$out/hostlease" ./cmd/ipam
	GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$out/hostlease-gc" ./cmd/ipam-gc
	cp "$out/hostlease" "$out/hostlease-gc" LICENSE README.md "$out/$name/"
	deterministic_tgz "$work/$name.tar.gz" "$out" "$name"
	files+=("$name.tar.gz")
done

log "image $IMAGE:$VERSION ($ARCHES)"
bash hack/image.sh hostlease-oci "$IMAGE:$VERSION" "$work/hostlease-$VERSION-image.oci.tar" "${ARCHES// /,}" \
	"$work/linux-{arch}/hostlease" "$work/linux-{arch}/hostlease-gc" >&2
files+=("hostlease-$VERSION-image.oci.tar")

log "chart $CHART_VERSION (appVersion $VERSION)"
helm=$(bash hack/helm-setup.sh | tail -n1)
mkdir -p "$work/helm-home" "$work/chart"
HELM_CONFIG_HOME=$work/helm-home HELM_CACHE_HOME=$work/helm-home HELM_DATA_HOME=$work/helm-home \
	"$helm" package deploy/helm/hostlease --version "$CHART_VERSION" --app-version "$VERSION" \
	--destination "$work/chart" >/dev/null 2>"$work/helm.log" || { cat "$work/helm.log" >&2; exit 1; }
chart=hostlease-$CHART_VERSION.tgz
[ -f "$work/chart/$chart" ] || die "helm package wrote $(ls "$work/chart")"
mkdir "$work/chart/x"
tar -C "$work/chart/x" -xzf "$work/chart/$chart"
deterministic_tgz "$work/$chart" "$work/chart/x" hostlease
files+=("$chart")

log "kustomize build deploy/base"
"$GO" build -o "$work/kustomize-build" ./hack/kustomize-build
"$work/kustomize-build" -image "ghcr.io/hostlease/hostlease=$IMAGE:$VERSION" deploy/base >"$work/hostlease-$VERSION.yaml"
files+=("hostlease-$VERSION.yaml")

(cd "$work" && sha256sum "${files[@]}") >"$work/sha256sums"
files+=(sha256sums)
for f in "${files[@]}"; do
	chmod 0644 "$work/$f"
	mv -f "$work/$f" "$DIST/$f"
done
log "wrote $DIST in $((SECONDS - t0))s:"
(cd "$DIST" && ls -l "${files[@]}") >&2
