#!/usr/bin/env bash
# hack/test.sh — the body of `make test` after setup, lint and build: unit +
# integration tests (-race), the e2e suite on every containerd version (`make
# e2e`) and on CRI-O (`make e2e-crio`), and the real Kubernetes node suite on
# two nodes (`make e2e-k8s`).
#
# Build, then test: `make setup` (hack/setup.sh) has built every tool and
# filled the Go build cache before this runs, so no suite compiles a tool
# while another runs, and a cold run differs from a warm one only by setup.
#
# What runs beside what (two cores; a runtime's own timeouts must never fire):
#   - the unit and integration tests, then the containerd suites one version
#     after the other, then the CRI-O suite (e2e/crio, `make e2e-crio`);
#   - beside them, the default real node (mostly waiting: kubelet's retry
#     back-off, an alert's `for:` window, a quiet minute);
#   - the second real node ("heal", a 5-minute storm of 50 pods) starts only
#     once the unit tests, the CPU-heaviest part, are done (HOSTLEASE_HEAL_GATE).
# So at most two suites that run real runtimes share the machine with one
# CPU-bound test process. The load average is sampled every 30 s into
# .test-load.log and its peak printed at the end, with the CPU seconds each
# part used and how busy the machine was (the wall time of make test cannot go
# below the CPU seconds it needs over the cores it has).
# The real-node summaries are printed last, the full logs are .e2e-k8s.log and
# .e2e-k8s-heal.log.
# Exit status: non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."

# CPU accounting: each part runs under `timed`, a shell that writes its
# `times` (the user+system seconds of the part's processes it waited for) to
# a file of its own, so a part that ends while another runs is counted as
# itself; the machine's busy seconds come from /proc/stat, so that the wall
# time can be read against what the cores can do.
cpu_dir=$(mktemp -d /tmp/hostlease-test-cpu.XXXXXX)
# One build of each binary the tests exec for the whole run
# (internal/testing/testbin.CacheEnv), instead of one per test package.
testbin_cache=$(mktemp -d /tmp/hostlease-testbin.XXXXXX)
export HOSTLEASE_TESTBIN_CACHE=$testbin_cache

# timed NAME CMD... runs CMD in such a shell; the real-node suite, which also
# needs a session of its own, runs timed_sh under setsid.
timed_sh='"$@"; rc=$?; times >"$CPU_OUT"; exit $rc'
timed() {
	local name=$1
	shift
	CPU_OUT="$cpu_dir/$name" bash -c "$timed_sh" timed "$@"
}
# cpu_of prints the CPU seconds part name used (? if it wrote none).
cpu_of() {
	awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2]; found = 1 }
		END { if (!found) printf "?" }' "$cpu_dir/$1" 2>/dev/null || printf '?'
}
machine_busy() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%d", ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat; }
busy0=$(machine_busy)

k8s_out=$(mktemp /tmp/hostlease-e2e-k8s-summary.XXXXXX)
gate=$(mktemp -u /tmp/hostlease-heal-gate.XXXXXX)
t0=$SECONDS
: >.test-load.log
( while sleep 30; do echo "$(date -u +%H:%M:%S) $((SECONDS - t0))s $(cut -d' ' -f1-3 /proc/loadavg)"; done >>.test-load.log ) &
load_pid=$!
export HOSTLEASE_HEAL_GATE=$gate
# setsid: the suite and everything it starts form a group of their own, so an
# interrupted run stops exactly that group and nothing else.
CPU_OUT="$cpu_dir/k8s" setsid bash -c "$timed_sh" timed \
	make --no-print-directory -o build e2e-k8s >"$k8s_out" 2>&1 &
k8s_pid=$!
stop_k8s() {
	if kill -0 "$k8s_pid" 2>/dev/null; then
		kill -TERM -- "-$k8s_pid" 2>/dev/null
		wait "$k8s_pid" 2>/dev/null
	fi
	rm -rf "$k8s_out" "$gate" "$cpu_dir" "$testbin_cache"
	kill "$load_pid" 2>/dev/null
}
trap 'stop_k8s; exit 130' INT TERM

# The release setup built (hack/setup.sh step 9) is handed to deploy's
# TestRelease, as the build its own must equal byte for byte, and to the
# real-node suite, which installs it, when it is a release of this very tree
# (hack/tree-stamp.sh); otherwise each builds its own, as when run alone.
if [ -f bin/make-test-release.tree ] && [ "$(cat bin/make-test-release.tree)" = "$(bash hack/tree-stamp.sh)" ]; then
	export HOSTLEASE_RELEASE_REF=$PWD/bin/make-test-release HOSTLEASE_K8S_RELEASE=$PWD/bin/make-test-release
	echo "test: setup's release is this tree's: TestRelease compares its build with it, the real-node suite installs it"
else
	echo "test: no release of this tree from setup: TestRelease builds two, the real-node suite one"
fi

rc=0
u0=$SECONDS
timed unit make --no-print-directory unit || rc=1
echo "test: unit and integration tests done in $((SECONDS - u0))s ($(cpu_of unit) CPU-s); the second real node may start"
: >"$gate"
e0=$SECONDS
timed e2e make --no-print-directory -o build e2e || rc=1
echo "test: containerd suites done in $((SECONDS - e0))s ($(cpu_of e2e) CPU-s)"
c0=$SECONDS
timed crio make --no-print-directory -o build e2e-crio || rc=1
echo "test: CRI-O suite done in $((SECONDS - c0))s ($(cpu_of crio) CPU-s)"

echo "test: waiting for the real-node suite (e2e/k8s, started $((SECONDS - t0))s ago)"
wait "$k8s_pid"
k8s_rc=$?
trap - INT TERM
echo "=== e2e/k8s (real Kubernetes node) ==="
cat "$k8s_out"
rm -f "$k8s_out"
echo "e2e-k8s: exit $k8s_rc"
[ "$k8s_rc" = 0 ] || rc=1
rm -f "$gate"
kill "$load_pid" 2>/dev/null
echo "test: peak 1-minute load average $(awk '$3 > m { m = $3 } END { print m + 0 }' .test-load.log) on $(nproc) cores (samples in .test-load.log)"
wall=$((SECONDS - t0))
busy=$(($(machine_busy) - busy0))
echo "test: CPU-s (user+system of each part's own processes; a container's, a shim's or a daemon's that outlives its parent are the machine's only): unit+integration $(cpu_of unit), containerd suites $(cpu_of e2e), CRI-O $(cpu_of crio), real nodes $(cpu_of k8s)"
rm -rf "$cpu_dir" "$testbin_cache"
echo "test: the machine was busy $busy of $((wall * $(nproc))) CPU-s ($(nproc) cores x ${wall}s): $((100 * busy / (wall * $(nproc) + 1)))%"
echo "test: $([ "$rc" = 0 ] && echo passed || echo FAILED) in ${wall}s (after setup, lint and build)"
exit $rc
