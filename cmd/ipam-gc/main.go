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
		{"audit", "audit [--data-dir D] [--network N] [--limit N] [-o table|json]", "the stores' audit logs: releases, reclaims, imports, rebuilds, repairs", cmdAudit},
		{"import", "import --network N [--host-local-dir D]", "import host-local state into a store", cmdImport},
		{"export", "export --network N [--host-local-dir D]", "write a store back as host-local files (rollback)", cmdExport},
		{"rebuild", "rebuild --network N [--cri-endpoint E] [--force]", "set a damaged store aside and rebuild it from CRI and what still decodes", cmdRebuild},
		{"install-cni", "install-cni [--from PLUGIN] [--to CNI_BIN_DIR] [--name NAME]", "install the plugin binary into the CNI bin dir atomically and check that it runs", cmdInstallCNI},
		{"version", "version", "print the version", func(_ []string, out, _ io.Writer) error { _, err := fmt.Fprintln(out, versionString()); return err }},
	}
}

// Exit codes, the same for every command (usage text and docs/runbook.md
// list them).
const (
	exitOK      = 0 // done; nothing wrong found
	exitFailed  = 1 // failed, or could not see everything asked for (a store it cannot read, CRI not answering)
	exitUsage   = 2 // bad command line: unknown flag, missing or unusable value
	exitDamaged = 3 // done, and every store was read, but some hold damaged (quarantined) records
	// exitConflict: import done, but host-local's files name addresses the
	// store holds for another attachment (kept for the store's holder).
	exitConflict = 4
)

// errUsage marks an error caused by how the command was called (exit code 2).
var errUsage = errors.New("usage")

// errDamaged marks a command that did its work and found damaged records
// (exit code 3); failures take precedence (exit code 1).
var errDamaged = errors.New("damaged records found")

// errConflict marks an import that did its work and found conflicts (exit
// code 4).
var errConflict = errors.New("conflicts found")

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
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errUsage):
			printf(stderr, "hostlease-gc %s: %v", c.name, err)
			fmt.Fprintf(stderr, "usage: hostlease-gc %s\n", c.usage)
			return exitUsage
		case errors.Is(err, errDamaged):
			printf(stderr, "hostlease-gc %s: %v", c.name, err)
			return exitDamaged
		case errors.Is(err, errConflict):
			printf(stderr, "hostlease-gc %s: %v", c.name, err)
			return exitConflict
		}
		printf(stderr, "hostlease-gc %s: %v", c.name, err)
		return exitFailed
	}
	printf(stderr, "hostlease-gc: unknown command %q", args[0])
	usage(stderr)
	return exitUsage
}

const exitCodesHelp = `
Exit status (every command):
  0  done; nothing wrong found
  1  failed, or could not see everything asked for: a data dir or store it
     cannot read, a status row in ERROR, CRI not answering (leaks, rebuild)
  2  bad command line: unknown flag, missing or unusable flag value
  3  done and every store was read, but some records are damaged (DAMAGED
     rows in list/status; also from leaks, export): release them by IP or
     rebuild the store
  4  import done, but host-local's files name addresses the store holds for
     another attachment: each conflict is listed; the address stays
     reserved for the store's holder
Text output escapes control characters (\t, \n, \x1b, \u202e, \\);
-o json is exact JSON.
`

func usage(w io.Writer) {
	fmt.Fprintln(w, "hostlease-gc: reclaims addresses leaked by failed CNI chains, and shows what the node holds.\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'hostlease-gc COMMAND --help' for a command's flags.")
	fmt.Fprint(w, exitCodesHelp)
}
