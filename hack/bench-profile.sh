#!/usr/bin/env bash
# Where one exec'd hostlease ADD/DEL spends its time, next to the exec
# floors of test/bench (static, skel, durable, skel-durable: see
# docs/benchmarks.md). Prints, for an initialised store:
#   - strace -f -c of one ADD and one DEL (syscall counts and time),
#   - the fdatasync calls of one ADD with their durations,
#   - package init time (GODEBUG=inittrace=1) of every binary, hostlease's
#     by package, binary sizes,
#   - perf stat of N ADD+DEL pairs (task-clock, page faults) when perf exists.
# (With no config on stdin the durable floors fail after their package init:
# only the init trace is read from those runs.)
# Usage: hack/bench-profile.sh [pairs]   (default 200; needs strace)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-200}
work=$(mktemp -d /var/tmp/hostlease-profile-XXXXXX)
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0
go build -trimpath -ldflags '-s -w' -o "$work/hostlease" ./cmd/ipam
for f in staticfloor skelfloor durablefloor; do go build -trimpath -ldflags '-s -w' -o "$work/$f" "./test/bench/$f"; done
cp "$work/skelfloor" "$work/skel-durable-floor" # the skel floor's durable mode is chosen by its name
floors="staticfloor skelfloor durablefloor skel-durable-floor"
conf="$work/conf.json"
printf '{"cniVersion":"1.0.0","name":"prof","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.30.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"%s/state"}}' "$work" >"$conf"
export CNI_NETNS=/var/run/netns/cni-prof CNI_IFNAME=eth0 CNI_PATH="$work" \
	CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=prof"
call() { CNI_COMMAND=$1 CNI_CONTAINERID=$2 "${@:3}" <"$conf" >/dev/null; }

# An initialised store with some history, as on a node.
for i in $(seq 20); do call ADD "warm$i" "$work/hostlease"; done
for i in $(seq 10); do call DEL "warm$i" "$work/hostlease"; done

echo "== sizes"; for b in $floors hostlease; do ls -l "$work/$b" | awk '{print $5, $NF}'; done
echo "== package init (ms, median of 21; GODEBUG=inittrace=1)"
for b in $floors hostlease; do
	for i in $(seq 21); do
		{ GODEBUG=inittrace=1 "$work/$b" </dev/null 2>&1 >/dev/null || true; } | awk '/^init /{s+=$5} END{printf "%.3f\n", s}'
	done | sort -n | sed -n 11p | sed "s/^/$b /"
done
echo "== hostlease's package init by package (us, median of 21; the 12 largest)"
for i in $(seq 21); do GODEBUG=inittrace=1 "$work/hostlease" </dev/null 2>&1 >/dev/null | grep '^init '; done |
	awk '{v[$2] = v[$2] " " $5 * 1000} END {for (k in v) print k, v[k]}' |
	while read -r name vals; do
		printf '%s %s\n' "$(printf '%s\n' $vals | sort -n | sed -n 11p)" "$name"
	done | sort -rn | head -12
if command -v strace >/dev/null; then
	echo "== strace -f -c: one ADD"
	CNI_COMMAND=ADD CNI_CONTAINERID=straced strace -f -c -o "$work/add.st" "$work/hostlease" <"$conf" >/dev/null
	head -25 "$work/add.st"
	echo "== strace -f -c: one DEL"
	CNI_COMMAND=DEL CNI_CONTAINERID=straced strace -f -c -o "$work/del.st" "$work/hostlease" <"$conf" >/dev/null
	head -25 "$work/del.st"
	echo "== fdatasync/flock/mmap of one ADD (-T: time in the call)"
	CNI_COMMAND=ADD CNI_CONTAINERID=straced2 strace -f -T -e trace=fdatasync,fsync,flock,mmap,pwrite64,pread64,openat \
		-o "$work/add2.st" "$work/hostlease" <"$conf" >/dev/null
	grep -v -e ENOENT -e '/proc/' -e 'PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS' "$work/add2.st" | sed 's/^[0-9]* *//'
	call DEL straced2 "$work/hostlease"
fi
if command -v perf >/dev/null; then
	cat >"$work/pairs.sh" <<EOF
#!/bin/sh
i=0; while [ \$i -lt $pairs ]; do i=\$((i+1))
CNI_CONTAINERID=p\$i CNI_COMMAND=ADD "\$1" <"$conf" >/dev/null || exit 1
CNI_CONTAINERID=p\$i CNI_COMMAND=DEL "\$1" <"$conf" >/dev/null
done
EOF
	chmod +x "$work/pairs.sh"
	for b in durablefloor skel-durable-floor hostlease; do
		echo "== perf stat: $pairs ADD+DEL pairs of $b (per pair: divide by $pairs)"
		perf stat -e task-clock,page-faults,context-switches "$work/pairs.sh" "$work/$b" 2>&1 | grep -E 'task-clock|page-faults|context-switches|elapsed'
	done
fi
