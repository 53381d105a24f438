SHELL := /bin/bash
# hostlease — see README.md. Every tool the targets need is installed by the
# project's own scripts under hack/ (idempotent, cached).

GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.buildVersion=$(VERSION) -X github.com/hostlease/hostlease/pkg/gc.Version=$(VERSION)
export CGO_ENABLED ?= 0
export GOFLAGS     ?= -buildvcs=false

# Packages for unit and integration tests (e2e runs on its own, last).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /e2e)

.PHONY: all build test unit e2e e2e-setup e2e-k8s k8s-setup bench lint vet fmt clean demo tools

all: build

build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hostlease ./cmd/ipam
	@if [ -d cmd/ipam-gc ]; then $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hostlease-gc ./cmd/ipam-gc; fi

tools:
	@if [ "$$(id -u)" = 0 ]; then bash hack/install-promtool.sh; else echo "tools: not root, skipping promtool install (deploy rule tests will say so)"; fi

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt vet

# test = vet + unit/integration tests with -race + the e2e suite (as root).
test: lint build tools unit e2e

unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m $(UNIT_PKGS)

e2e-setup:
	bash hack/e2e-setup.sh

# Kubernetes v1.37.2 + etcd for e2e/k8s (cached; ~7 min cold on 2 cores).
k8s-setup:
	bash hack/k8s-setup.sh

# Only the real-node suite (part of e2e). One at a time per machine.
e2e-k8s: build
	$(GO) test -count=1 -timeout 30m -v ./e2e/k8s/ 2>&1 | tee .e2e-k8s.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|SKIP|\s+[a-z_]+\.go:[0-9]+:)' ; exit $${PIPESTATUS[0]}

e2e: build
	@if [ -d e2e ]; then $(GO) test -count=1 -timeout 25m -v ./e2e/... 2>&1 | tee .e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|SKIP|\s+[a-z_]+\.go:[0-9]+:)' ; exit $${PIPESTATUS[0]}; fi

bench: build
	@mkdir -p bin
	set -o pipefail; $(GO) test -run '^$$' -bench Sweep10k -benchtime 20x -count 1 ./pkg/gc/ | tee bin/bench-sweep.txt
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m ./test/bench -args -bench.out=$(CURDIR)/bin/bench-report.md -bench.sweep=$(CURDIR)/bin/bench-sweep.txt $(BENCH_ARGS)
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./test/bench -args -bench.sweepload-only -bench.sweep-interval 1s -bench.sweep-k 1600 -bench.out=$(CURDIR)/bin/bench-sweepload-1s.md
	@echo "bench: report written to bin/bench-report.md, ADD/DEL under sweeps every 1s to bin/bench-sweepload-1s.md (BENCH_ARGS='-bench.doc=$(CURDIR)/docs/benchmarks.md' also updates the docs)"

demo: build
	@if [ -x hack/demo.sh ]; then bash hack/demo.sh; else echo "demo: plugin-level story"; bash hack/demo-plugin.sh; fi

clean:
	rm -rf bin .e2e.log .e2e-k8s.log
