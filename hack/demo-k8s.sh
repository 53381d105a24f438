#!/usr/bin/env bash
# make demo-k8s: containerd #12130 on a real single-node Kubernetes v1.37.2,
# driven by kubelet's own retry loop — first with host-local, then with
# hostlease and the hostlease-gc DaemonSet installed from deploy/ — showing
# `kubectl get pods` retrying, the AddressReclaimed Events, the pool gauges
# from /metrics and a before/after table.
#
# Needs root and Go (run it through make: it builds bin/ first). Self-installing: hack/k8s-setup.sh builds and caches
# etcd and the Kubernetes binaries (from the Go module proxy, ~7 min cold on
# an idle 2-core machine), containerd, the CNI plugins and the pause image;
# warm, the demo takes about 4 minutes. Everything it starts and changes
# (processes, links hlk8s-*, /tmp/hostlease-k8s) is undone at the end, as
# e2e/k8s/README.md describes. One real-node run at a time per machine
# (make e2e-k8s and make bench-k8s use the same node).
#
# The demo is the Go test e2e/k8s.TestDemoK8s (HOSTLEASE_DEMO=1); this
# script shows its story and hides the test framework's lines (the full log
# is printed if anything fails).
set -uo pipefail

cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "make demo-k8s needs root: kubelet and containerd create network namespaces, bridges and cgroups." >&2; exit 1; }
[ -x bin/hostlease ] && [ -x bin/hostlease-gc ] || { echo "demo-k8s: run it as make demo-k8s (builds bin/ first)" >&2; exit 1; }

log=$(mktemp /tmp/hostlease-demo-k8s.XXXXXX.log)
t0=$SECONDS
echo "demo-k8s: setting up (hack/k8s-setup.sh; cached under ${HOSTLEASE_K8S_CACHE:-/var/cache/hostlease-k8s}, the first run builds Kubernetes: ~7 min on an idle 2-core machine) and compiling the demo"

HOSTLEASE_DEMO=1 go test -count=1 -timeout 60m -run '^TestDemoK8s$' -v ./e2e/k8s/ 2>&1 |
	tee "$log" |
	grep --line-buffered -v -E '^=== (RUN|PAUSE|CONT|NAME)|^ *--- PASS|^PASS$|^ok[[:space:]]|^ {4}[A-Za-z0-9_]+\.go:[0-9]+: |^ {8}|^e2e/k8s: (reaping|removed|remove )|^(k8s-setup|e2e-setup): (cache: |done|.*(cached|already))'
rc=${PIPESTATUS[0]}

[ "$rc" = 0 ] || { echo; echo "demo-k8s FAILED (exit $rc). Full log ($log):"; cat "$log"; exit "$rc"; }
rm -f "$log"
left=$(ls -d /tmp/hostlease-k8s 2>/dev/null; ip -o link show 2>/dev/null | grep -o 'hlk8s-[a-z0-9-]*')
[ -z "$left" ] || { echo "demo-k8s: not cleaned up: $left" >&2; exit 1; }
echo "demo-k8s: cleaned up (no /tmp/hostlease-k8s, no hlk8s-* links); took $((SECONDS - t0))s"
