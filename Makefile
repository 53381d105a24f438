SHELL := /bin/bash
# hostlease — see README.md. Every tool the targets need is installed by the
# project's own scripts under hack/ (idempotent, cached).

GO       ?= go
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
DIST     ?= dist
LDFLAGS  := -s -w -X main.buildVersion=$(VERSION) -X github.com/hostlease/hostlease/pkg/daemon.Version=$(VERSION)
export CGO_ENABLED ?= 0
export GOFLAGS     ?= -buildvcs=false

# Packages for unit and integration tests (e2e runs on its own, last).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /e2e)

.PHONY: all build release test setup unit e2e e2e-setup e2e-k8s e2e-crio crio-setup k8s-setup helm-setup registry-setup bench bench-k8s lint vet fmt clean demo demo-k8s tools

all: build

build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hostlease ./cmd/ipam
	@if [ -d cmd/ipam-gc ]; then $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hostlease-gc ./cmd/ipam-gc; fi

# The release's artefacts in $(DIST) (default dist/): per architecture
# (linux/amd64, linux/arm64) a tar.gz of both binaries, the DaemonSet image
# as an OCI archive, the packaged chart, the rendered kustomize base and
# sha256sums; version from git describe (hack/release.sh says which file is
# what and how the chart's SemVer is derived). Reproducible.
release:
	@VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' DIST='$(DIST)' GO='$(GO)' bash hack/release.sh

tools:
	@if [ "$$(id -u)" = 0 ]; then bash hack/install-promtool.sh; else echo "tools: not root, skipping promtool install (deploy rule tests will say so)"; fi

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt vet

# test = vet + unit/integration tests with -race + the e2e suites on a real
# containerd (every version) and on a real Kubernetes node (as root). The
# real-node suite spends most of its time waiting (kubelet's retry back-off,
# an alert's `for:` window, a quiet minute), so hack/test.sh runs it beside
# the unit and containerd suites and waits for it at the end.
test: setup lint build
	@bash hack/test.sh

# Every tool the suites need, built before any suite starts (hack/setup.sh:
# containerd versions, Kubernetes, etcd, helm, promtool, the image tool, the
# Go build cache of the tests). Cached: a warm run only checks stamps.
setup:
	@bash hack/setup.sh

unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m $(UNIT_PKGS)

# containerd versions of the e2e suite (e2e/harness/containerd-versions.txt,
# the default first). `make e2e` runs the whole suite on the default version
# and the core scenarios on every other one; CONTAINERD_VERSIONS="v1.7.35
# v2.4.2" runs any subset (each as the default would be run only if it is
# the default). `make demo CONTAINERD_VERSION=v1.7.35` picks the demo's.
CONTAINERD_ALL      := $(shell bash hack/e2e-setup.sh --print-versions 2>/dev/null)
CONTAINERD_DEFAULT  := $(firstword $(CONTAINERD_ALL))
CONTAINERD_VERSIONS ?= $(CONTAINERD_ALL)
CONTAINERD_VERSION  ?= $(CONTAINERD_DEFAULT)
comma := ,
E2E_VERSIONS        = $(subst $(comma), ,$(CONTAINERD_VERSIONS))

e2e-setup:
	CONTAINERD_VERSIONS="$(E2E_VERSIONS)" bash hack/e2e-setup.sh

# Kubernetes v1.37.2 + etcd for e2e/k8s (cached; ~7 min cold on 2 cores).
k8s-setup:
	bash hack/k8s-setup.sh

# Helm v3.22.0 for the chart's tests (deploy/, e2e/k8s), built from the Go
# module proxy in a throwaway module and cached; the tests run it themselves.
helm-setup:
	bash hack/helm-setup.sh

# crane (go-containerregistry, built and cached) and Debian's skopeo, for
# README's Quick start run as written on the real node (TestQuickStartHelm).
registry-setup:
	bash hack/registry-setup.sh

# CRI-O v1.36.3 and pinns (CGO_ENABLED=0), conmon, crun and skopeo from apt
# (hack/crio-setup.sh; cached under /var/cache/hostlease-crio/bin; about 5 min of CPU cold).
crio-setup:
	bash hack/crio-setup.sh

# The CRI-O suite (e2e/crio: a real CRI-O per test, its own dirs, subnets
# 10.97.x and bridges hlc*). Output to .e2e-crio.log, the summary to stdout.
e2e-crio: build
	@t0=$$(date +%s); set -o pipefail; \
	$(GO) test -count=1 -timeout 20m -v ./e2e/crio/ 2>&1 | tee .e2e-crio.log | \
		grep -E '^(--- |PASS|FAIL|ok|\s+[a-z_]+\.go:[0-9]+:)' | grep -v '^--- SKIP'; \
	r=$${PIPESTATUS[0]}; echo "e2e-crio: exit $$r in $$(( $$(date +%s) - t0 ))s"; exit $$r

# The real-node suite alone (e2e/k8s: its own caches, bridges, ports and
# lock), on two nodes at once (hack/e2e-k8s.sh; E2E_K8S_NODES=1: one).
# Output to .e2e-k8s.log and .e2e-k8s-heal.log, the summaries to stdout.
e2e-k8s: build
	@GO=$(GO) bash hack/e2e-k8s.sh

# One `go test ./e2e/` per containerd version (the harness reads
# CONTAINERD_VERSION), then any other test package under e2e/ except the
# real-node suite (e2e-k8s) once, on the default version; all output goes to
# .e2e.log, the summary to stdout.
e2e: build
	@if [ -d e2e ]; then \
		: >.e2e.log; rc=0; \
		for v in $(E2E_VERSIONS); do \
			if [ "$$v" = "$(CONTAINERD_DEFAULT)" ]; then suite=full; pkgs="./e2e/ ./e2e/harness/"; else suite=core; pkgs=./e2e/; fi; \
			echo "e2e: containerd $$v, $$suite suite"; t0=$$(date +%s); \
			CONTAINERD_VERSION=$$v HOSTLEASE_E2E_SUITE=$$suite $(GO) test -count=1 -timeout 25m -v $$pkgs 2>&1 | tee -a .e2e.log | \
				grep -E '^(=== RUN|--- |PASS|FAIL|ok|\s+[a-z_]+\.go:[0-9]+:)' | grep -v -e '^--- SKIP' -e '^=== RUN' ; \
			r=$${PIPESTATUS[0]}; echo "e2e: containerd $$v, $$suite suite: exit $$r in $$(( $$(date +%s) - t0 ))s"; \
			[ "$$r" = 0 ] || rc=1; \
		done; \
		others=$$($(GO) list ./e2e/... | grep -v -e '/e2e$$' -e '/e2e/harness$$' -e '/e2e/failplugin$$' -e '/e2e/k8s$$' -e '/e2e/crio$$'); \
		if [ -n "$$others" ]; then \
			echo "e2e: $$others (default containerd)"; \
			$(GO) test -count=1 -timeout 30m -v $$others 2>&1 | tee -a .e2e.log | \
				grep -E '^(--- |PASS|FAIL|ok|\s+[a-z_]+\.go:[0-9]+:)' | grep -v '^--- SKIP'; \
			[ "$${PIPESTATUS[0]}" = 0 ] || rc=1; \
		fi; \
		exit $$rc; \
	fi

# The plugin's fast paths measured against the same code with each one off
# (build tags; see docs/benchmarks.md, "Fast paths").
BENCH_FASTPATHS = -bench.variants nofastdecode:nofastdecode,nofastencode:nofastencode

bench: build
	@mkdir -p bin
	set -o pipefail; $(GO) test -run '^$$' -bench Sweep10k -benchtime 20x -count 1 ./pkg/daemon/ | tee bin/bench-sweep.txt
	$(GO) test -run '^$$' -bench Plugins -benchtime 1x -count 1 -timeout 60m ./test/bench -args -bench.out=$(CURDIR)/bin/bench-report.md -bench.sweep=$(CURDIR)/bin/bench-sweep.txt -bench.skip-sweepload $(BENCH_FASTPATHS) $(BENCH_ARGS)
	$(GO) test -run '^$$' -bench Plugins -benchtime 1x -count 1 -timeout 30m ./test/bench -args -bench.sweepload-only -bench.sweep-interval 1s -bench.sweep-k 1600 -bench.out=$(CURDIR)/bin/bench-sweepload-1s.md
	set -o pipefail; $(GO) test -run '^$$' -bench HealStorm -benchtime 1x -count 1 -timeout 20m ./test/bench | tee bin/bench-healstorm.md
	@echo "bench: report written to bin/bench-report.md, ADD/DEL under sweeps every 1s to bin/bench-sweepload-1s.md, the heal storm (walk outside the lock) to bin/bench-healstorm.md (BENCH_ARGS='-bench.doc=$(CURDIR)/docs/benchmarks.md' also updates the docs)"
	@$(MAKE) --no-print-directory -o build bench-k8s

# The real node's benchmarks (e2e/k8s, as root): pod start with hostlease
# against host-local (BenchmarkPodStart: 110 pods at once, 3 repetitions;
# ~15 min warm) and the retry storm (BenchmarkRetryStorm: 50 pods with a
# failing chain on a /24 for 5 minutes; ~6 min warm). BENCH_K8S selects
# them (a -bench regexp), BENCH_K8S_ARGS adds flags (-podstart.reps,
# -podstart.pods, -podstart.networks). Reports in bin/bench-pod-start.md and
# bin/bench-retry-storm.md, full log in bin/bench-k8s.log.
BENCH_K8S = ^Benchmark(PodStart|RetryStorm)$$
bench-k8s: build
	@mkdir -p bin
	@if [ "$$(id -u)" != 0 ]; then echo "bench-k8s: skipped: needs root (runs a Kubernetes node)"; exit 0; fi; \
	set -o pipefail; $(GO) test -count=1 -timeout 90m -run '^$$' -bench '$(BENCH_K8S)' -benchtime 1x -v ./e2e/k8s/ \
		-args -storm.out=$(CURDIR)/bin/bench-retry-storm.md -podstart.out=$(CURDIR)/bin/bench-pod-start.md $(BENCH_K8S_ARGS) 2>&1 | \
		tee bin/bench-k8s.log | grep -E '^(Benchmark|\||--- |PASS|FAIL|ok|\s+[a-z_]+\.go:[0-9]+:)'

demo: build
	@if [ -x hack/demo.sh ]; then CONTAINERD_VERSION=$(CONTAINERD_VERSION) bash hack/demo.sh; else echo "demo: plugin-level story"; bash hack/demo-plugin.sh; fi

# containerd #12130 on a real Kubernetes node, host-local then hostlease with
# the DaemonSet (hack/demo-k8s.sh; root; ~4 min warm, builds Kubernetes cold).
demo-k8s: build
	@bash hack/demo-k8s.sh

clean:
	rm -rf bin dist .e2e.log .e2e-k8s.log .e2e-crio.log
