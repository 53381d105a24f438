// Command staticfloor is the lowest exec floor of the plugin benchmarks: a
// static Go binary that reads its stdin and, for ADD, prints a fixed CNI
// result. No CNI library, no config parsing, no state: its cost is fork/exec,
// the Go runtime's start and exit, and one read and one write. Anything a
// real plugin costs above it is what its libraries and its work add.
package main

import (
	"io"
	"os"
)

// result is the ADD result the other floors print (skel's floor prints the
// same address through types.PrintResult).
const result = `{
    "cniVersion": "1.0.0",
    "ips": [
        {
            "address": "10.0.0.2/16",
            "gateway": "10.0.0.1"
        }
    ]
}`

func main() {
	if _, err := io.ReadAll(os.Stdin); err != nil {
		os.Exit(1)
	}
	if os.Getenv("CNI_COMMAND") == "ADD" {
		os.Stdout.WriteString(result)
	}
}
