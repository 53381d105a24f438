// Package bench measures the plugin the way a container runtime uses it: it
// builds and exec's real binaries — an exec floor (./floor, a trivial static
// CNI plugin), host-local from the pinned containernetworking/plugins module,
// and hostlease (./cmd/ipam) — with the same network config, and reports ADD
// and DEL latency at several pool occupancies plus 32-way concurrent
// throughput as a markdown table (absolute figures and ratios). It then times
// hostlease's ADD and DEL on a store of 10 000 records with no daemon and
// while a real `hostlease-gc run` process (./cmd/ipam-gc) sweeps that store
// against a gRPC CRI server, and includes the pkg/daemon sweep benchmarks'
// figures (-bench.sweep).
//
// Run it with `make bench` (see docs/benchmarks.md for the method and the
// figures of a run). The benchmark never asserts timings: it fails only when
// a plugin call fails, the daemon fails a sweep, or the state is not what it
// should be after the run.
package bench
