#!/usr/bin/env bash
# hack/test.sh — the body of `make test` after lint, build and tools:
#   unit + integration tests (-race), the e2e suite on every containerd
#   version (`make e2e`), and the real Kubernetes node suite (`make e2e-k8s`).
#
# The real-node suite is mostly waiting (kubelet's retry back-off, an alert's
# `for:` window, a quiet minute of API requests), so it runs in the background
# beside the others: it has its own caches, bridges, subnets, ports and lock,
# and shares nothing with the containerd suites; it runs on two nodes at once
# itself (hack/e2e-k8s.sh). `make test` built bin/ before this runs; `-o
# build` keeps the suites from rebuilding it under each other. The real-node
# summaries are printed last, the full logs are .e2e-k8s.log and
# .e2e-k8s-heal.log.
# Exit status: non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."

k8s_out=$(mktemp /tmp/hostlease-e2e-k8s-summary.XXXXXX)
t0=$SECONDS
# setsid: the suite and everything it starts form a group of their own, so an
# interrupted run stops exactly that group and nothing else.
setsid make --no-print-directory -o build e2e-k8s >"$k8s_out" 2>&1 &
k8s_pid=$!
stop_k8s() {
	if kill -0 "$k8s_pid" 2>/dev/null; then
		kill -TERM -- "-$k8s_pid" 2>/dev/null
		wait "$k8s_pid" 2>/dev/null
	fi
	rm -f "$k8s_out"
}
trap 'stop_k8s; exit 130' INT TERM

rc=0
make --no-print-directory unit || rc=1
make --no-print-directory -o build e2e || rc=1

echo "test: waiting for the real-node suite (e2e/k8s, started $((SECONDS - t0))s ago)"
wait "$k8s_pid"
k8s_rc=$?
trap - INT TERM
echo "=== e2e/k8s (real Kubernetes node) ==="
cat "$k8s_out"
rm -f "$k8s_out"
echo "e2e-k8s: exit $k8s_rc"
[ "$k8s_rc" = 0 ] || rc=1
echo "test: $([ "$rc" = 0 ] && echo passed || echo FAILED) in $((SECONDS - t0))s (after lint, build, tools)"
exit $rc
