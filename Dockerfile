# syntax=docker/dockerfile:1
#
# One image, two static binaries:
#   /hostlease     the CNI IPAM plugin (copied to the host's /opt/cni/bin by the
#                  DaemonSet's install-cni init container)
#   /hostlease-gc  the node daemon and operator CLI (the image's entrypoint)
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/hostlease/hostlease:v0.1.0 .
#
# Base: distroless static, "nonroot" variant (no libc needed, CGO_ENABLED=0):
# no shell, no busybox, no package manager. The install-cni init container
# runs `hostlease-gc install-cni` (a Go copy-fsync-rename-verify), so nothing
# in the image needs a shell. USER 65532 so that running the image by hand is
# unprivileged by default; the DaemonSet deliberately runs both containers as
# uid 0, with every capability dropped, because the CRI socket, the plugin's
# stores and /opt/cni/bin are root-owned (see deploy/base/daemonset.yaml).
# WORKDIR / because distroless nonroot's working dir /home/nonroot is 0700
# and owned by 65532, and the containers run as uid 0 with every capability
# dropped: nothing should depend on entering it (hack/image.sh's image uses /
# too).
#
# Without docker: hack/image.sh builds the same layout (a base layer made
# from files, equivalent to distroless static: passwd/group with root and
# nonroot, /tmp 1777, the CA bundle) with go-containerregistry, reproducibly;
# the tests use it because no registry is reachable there (README.md).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X main.buildVersion=${VERSION}" \
      -o /out/hostlease ./cmd/ipam && \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/hostlease/hostlease/pkg/daemon.Version=${VERSION}" \
      -o /out/hostlease-gc ./cmd/ipam-gc

FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /
COPY --from=build /out/hostlease /hostlease
COPY --from=build /out/hostlease-gc /hostlease-gc
ENTRYPOINT ["/hostlease-gc"]
CMD ["run"]
