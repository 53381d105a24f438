#!/usr/bin/env bash
# make demo: containerd #12130 on a real, private containerd — first with
# host-local, then with hostlease + hostlease-gc — with a before/after table and
# the daemon's metrics. CONTAINERD_VERSION picks the containerd (any release
# hack/e2e-setup.sh can build, e.g. v1.7.35 or v2.4.2; default: the first of
# e2e/harness/containerd-versions.txt). Needs root and Go; everything else (runc from apt,
# containerd and the CNI plugins built from the Go module cache, the pause
# image) is set up and cached by hack/e2e-setup.sh. Cleans up after itself.
#
# The demo is the Go test e2e.TestDemo (HOSTLEASE_DEMO=1), which runs the
# same code as the e2e scenario TestScenario2LeakReclaimed; this script shows
# its story and hides the test framework's lines (the full log is printed if
# anything fails).
set -uo pipefail

cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "make demo needs root: it runs a private containerd, runc and CNI plugins that create" >&2
	echo "network namespaces and bridges. Run it as root (e.g. sudo make demo)." >&2
	exit 1
fi
if ! command -v go >/dev/null 2>&1; then
	echo "make demo needs Go (see go.mod for the version)." >&2
	exit 1
fi
if [ ! -x bin/hostlease ] || [ ! -x bin/hostlease-gc ]; then
	echo "demo: building bin/hostlease and bin/hostlease-gc"
	make build || exit 1
fi

version=${CONTAINERD_VERSION:-$(bash hack/e2e-setup.sh --print-versions | head -n1)}
if ! [[ "$version" =~ ^v[12]\.[0-9]+\.[0-9]+$ ]]; then
	echo "demo: CONTAINERD_VERSION=$version is not a containerd release like v2.1.4 or v1.7.35" >&2
	exit 2
fi
log=$(mktemp /tmp/hostlease-demo.XXXXXX.log)
echo "demo: containerd $version; setting up the environment (cached under ${HOSTLEASE_CACHE:-/var/cache/hostlease-e2e}; the first run of a version builds it, 2-5 min on 2 cores) and compiling the demo"

CONTAINERD_VERSION=$version HOSTLEASE_DEMO=1 go test -count=1 -timeout 15m -run '^TestDemo$' -v ./e2e/ 2>&1 |
	tee "$log" |
	grep --line-buffered -v -E '^=== (RUN|PAUSE|CONT|NAME)|^ *--- PASS|^PASS$|^ok[[:space:]]|^ {4}[A-Za-z0-9_]+\.go:[0-9]+: |^ {8}'
rc=${PIPESTATUS[0]}

if [ "$rc" != 0 ]; then
	echo
	echo "demo FAILED (exit $rc). Full log ($log):"
	cat "$log"
	exit "$rc"
fi
rm -f "$log"
