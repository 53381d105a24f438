// Command staticfloor is the lowest exec floor of the plugin benchmarks: a
// static Go binary that reads its stdin and, for ADD, prints a fixed CNI
// result. No CNI library, no config parsing, no state: its cost is fork/exec,
// the Go runtime's start and exit, and one read and one write. Anything a
// real plugin costs above it is what its libraries and its work add.
package main

import (
	"io"
	"os"

	"github.com/hostlease/hostlease/test/bench/floorresult"
)

func main() {
	if _, err := io.ReadAll(os.Stdin); err != nil {
		os.Exit(1)
	}
	if os.Getenv("CNI_COMMAND") == "ADD" {
		os.Stdout.WriteString(floorresult.ADD)
	}
}
