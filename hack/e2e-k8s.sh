#!/usr/bin/env bash
# hack/e2e-k8s.sh — `make e2e-k8s`: the real-node suite (e2e/k8s) on two
# nodes at once.
#
# TestRetriesHealWithoutDaemon proves healing with no DaemonSet on the node
# for 5 minutes; every other test needs the DaemonSet. So it runs on a node
# of its own, "heal" (HOSTLEASE_K8S_INSTANCE=heal: its own control plane,
# containerd and kubelet under /tmp/hostlease-k8s-heal, in a network
# namespace of its own where its ports, links and addresses are the default
# node's), while the others run on the default node. E2E_K8S_NODES=1 runs
# the whole suite on the default node, one test after the other.
# E2E_K8S_RUN=<regexp> runs only the tests it selects (go test -run; e.g.
# E2E_K8S_RUN=Multus, E2E_K8S_RUN='^Test(Pods|Multus)$'), on the default
# node alone (a selected TestRetriesHealWithoutDaemon uninstalls the
# DaemonSet first, as with E2E_K8S_NODES=1).
#
# Logs: .e2e-k8s.log (default node) and .e2e-k8s-heal.log; the summary of
# each goes to stdout, the heal node's last. Exit status: non-zero if either
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
heal='^TestRetriesHealWithoutDaemon$'
test_bin=bin/e2e-k8s.test

summary() { grep -E '^(=== RUN|--- |PASS|FAIL|ok|SKIP|\s+[a-z_]+\.go:[0-9]+:)'; }

# Kubernetes, containerd and the CNI plugins cached, and one test build for
# both nodes, before the heal node starts: its network namespace has no
# network (GOPROXY=off there says so at once if something still needs the
# module proxy).
bash hack/k8s-setup.sh || exit 1
bash hack/multus-setup.sh >/dev/null || exit 1
# TestQuickStartHelm runs README's Quick start on one release with crane and
# skopeo (built/installed here, never inside the test).
bash hack/registry-setup.sh >/dev/null || exit 1
# HOSTLEASE_K8S_RELEASE: a release directory of your own instead (used as is).
if [ -z "${HOSTLEASE_K8S_RELEASE:-}" ]; then
	mkdir -p bin && rm -rf bin/e2e-k8s-release
	make --no-print-directory release DIST=bin/e2e-k8s-release GO="$GO" >/dev/null 2>bin/e2e-k8s-release.log ||
		{ cat bin/e2e-k8s-release.log; exit 1; }
	HOSTLEASE_K8S_RELEASE=$PWD/bin/e2e-k8s-release
fi
export HOSTLEASE_K8S_RELEASE
mkdir -p bin
$GO test -c -o "$test_bin" ./e2e/k8s/ || exit 1
t0=$SECONDS

# The test binary runs in the package's directory, as `go test` runs it.
suite() { (cd e2e/k8s && exec "$@" "../../$test_bin" -test.count=1 -test.timeout=40m -test.v "${args[@]}"); }

if [ -n "${E2E_K8S_RUN:-}" ] || [ "${E2E_K8S_NODES:-2}" = 1 ]; then
	args=()
	what="one node"
	if [ -n "${E2E_K8S_RUN:-}" ]; then
		args=(-test.run "$E2E_K8S_RUN")
		what="one node, -run '$E2E_K8S_RUN'"
	fi
	suite env 2>&1 | tee .e2e-k8s.log | summary
	rc=${PIPESTATUS[0]}
	echo "e2e-k8s: $([ "$rc" = 0 ] && echo ok || echo FAIL) in $((SECONDS - t0))s ($what)"
	exit "$rc"
fi

args=(-test.run "$heal")
{
	# make test opens the gate once its CPU-heaviest part is done (hack/test.sh).
	if [ -n "${HOSTLEASE_HEAL_GATE:-}" ]; then
		while [ ! -e "$HOSTLEASE_HEAL_GATE" ]; do sleep 2; done
		echo "e2e-k8s: node heal starts $((SECONDS - t0))s after the default node"
	fi
	suite unshare --net -- sh -c 'ip link set lo up && exec "$@"' sh env HOSTLEASE_K8S_INSTANCE=heal GOPROXY=off
	heal_rc=$?
	echo "e2e-k8s: node heal $([ "$heal_rc" = 0 ] && echo ok || echo FAIL) in $((SECONDS - t0))s"
	exit "$heal_rc"
} >.e2e-k8s-heal.log 2>&1 &
heal_pid=$!

args=(-test.skip "$heal")
suite env 2>&1 | tee .e2e-k8s.log | summary
rc=${PIPESTATUS[0]}
echo "e2e-k8s: default node $([ "$rc" = 0 ] && echo ok || echo FAIL) in $((SECONDS - t0))s"

wait "$heal_pid"
heal_rc=$?
echo "=== e2e/k8s node heal (TestRetriesHealWithoutDaemon; full log .e2e-k8s-heal.log) ==="
summary <.e2e-k8s-heal.log
grep '^e2e-k8s: node heal' .e2e-k8s-heal.log
[ "$rc" = 0 ] && [ "$heal_rc" = 0 ]
