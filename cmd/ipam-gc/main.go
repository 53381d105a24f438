// Command hostlease-gc is the hostlease node daemon and operator CLI. `run`
// reconciles the plugin's stores with the container runtime (CRI) and reclaims
// addresses leaked by failed CNI chains; the other commands let a person see
// and fix what the node holds.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

type command struct {
	name, usage, summary string
	run                  func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run [flags]", "run the reconciling daemon", cmdRun},
		{"status", "status [--data-dir D] [-o table|json]", "pools per network: size, used, free, pending, leak candidates", cmdStatus},
		{"list", "list [--data-dir D] [--network N] [-o table|json]", "every allocation: IP, pod, sandbox, state, age", cmdList},
		{"leaks", "leaks [--data-dir D] [--cri-endpoint E] [policy flags] [-o table|json]", "what a sweep would reclaim now, and why (or why not)", cmdLeaks},
		{"release", "release IP|--sandbox ID [--network N] [--yes]", "release an address (or a sandbox's addresses) by hand", cmdRelease},
		{"import", "import --network N [--host-local-dir D]", "import host-local state into a store", cmdImport},
		{"export", "export --network N [--host-local-dir D]", "write a store back as host-local files (rollback)", cmdExport},
		{"rebuild", "rebuild --network N [--cri-endpoint E] [--force]", "set an unreadable store aside and rebuild it from CRI", cmdRebuild},
		{"version", "version", "print the version", func(_ []string, out, _ io.Writer) error { _, err := fmt.Fprintln(out, versionString()); return err }},
	}
}

// errUsage marks an error caused by how the command was called (exit code 2).
var errUsage = errors.New("usage")

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "hostlease-gc %s: %v\nusage: hostlease-gc %s\n", c.name, err, c.usage)
			return 2
		}
		fmt.Fprintf(stderr, "hostlease-gc %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "hostlease-gc: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "hostlease-gc: reclaims addresses leaked by failed CNI chains, and shows what the node holds.\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'hostlease-gc COMMAND --help' for a command's flags.")
}
