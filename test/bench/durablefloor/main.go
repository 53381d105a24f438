// Command durablefloor is the durable exec floor of the plugin benchmarks:
// the static floor (../staticfloor) plus the least any crash-safe IPAM plugin
// does per call (../floorcommit: flock a state file in the config's
// ipam.dataDir, write and fdatasync two 4 KiB pages in order). No CNI
// library and no JSON decoding.
//
// Built with -tags onep (as "durable-floor-1p") it runs on one P from early
// initialisation, as hostlease does (internal/oneproc, onep.go): what that
// runtime setting alone is worth to the floor, so that hostlease's figures
// against the durable floor can be read with and without it.
package main

import (
	"io"
	"os"

	"github.com/hostlease/hostlease/test/bench/floorcommit"
	"github.com/hostlease/hostlease/test/bench/floorresult"
)

func main() {
	conf, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err.Error())
	}
	dir := floorcommit.DataDir(conf)
	if dir == "" {
		fail("no ipam.dataDir in the config")
	}
	verb := os.Getenv("CNI_COMMAND")
	if err := floorcommit.Commit(dir, verb, os.Getenv("CNI_CONTAINERID")); err != nil {
		fail(err.Error())
	}
	if verb == "ADD" {
		os.Stdout.WriteString(floorresult.ADD)
	}
}

func fail(msg string) {
	os.Stdout.WriteString(`{"cniVersion":"1.0.0","code":5,"msg":"durable floor: ` + msg + `"}`)
	os.Exit(1)
}
