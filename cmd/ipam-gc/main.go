// Command hostlease-gc is the hostlease node daemon and operator CLI. `run`
// reconciles the plugin's stores with the container runtime (CRI) and reclaims
// addresses leaked by failed CNI chains; the other commands let a person see
// and fix what the node holds.
//
// The command line is spf13/cobra's (as kubectl's and helm's): help on
// stdout with exit status 0, GNU-style flags (--long, -s), each verb's own
// flags only, stray arguments refused with exit status 2.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes, the same for every command (the root help and docs/cli.md
// list them).
const (
	exitOK      = 0 // done; nothing wrong found
	exitFailed  = 1 // failed, or could not see everything asked for (a store it cannot read, CRI not answering)
	exitUsage   = 2 // bad command line: unknown flag, missing or unusable value, stray argument
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

// realMain runs the command line args and returns the exit status. Errors are
// printed here, escaped, once: the commands return them.
func realMain(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	c, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	name := c.CommandPath()
	switch {
	case errors.Is(err, errUsage):
		printf(stderr, "%s: %v", name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		printf(stderr, "usage: %s", c.UseLine())
		printf(stderr, "Run '%s --help' for its flags and examples.", name)
		return exitUsage
	case errors.Is(err, errDamaged):
		printf(stderr, "%s: %v", name, err)
		return exitDamaged
	case errors.Is(err, errConflict):
		printf(stderr, "%s: %v", name, err)
		return exitConflict
	}
	printf(stderr, "%s: %v", name, err)
	return exitFailed
}

const exitCodesHelp = `Exit status (every command):
  0  done; nothing wrong found
  1  failed, or could not see everything asked for: a data dir or store it
     cannot read or write, a status row in ERROR, CRI not answering (leaks,
     rebuild), a doctor finding
  2  bad command line: unknown flag or command, missing or unusable flag
     value, a stray argument
  3  done and every store was read, but some records are damaged (DAMAGED
     rows in list/status; also from leaks, export): release them by IP or
     rebuild the store
  4  import done, but host-local's files name addresses the store holds for
     another attachment: each conflict is listed; the address stays
     reserved for the store's holder

Text output escapes control characters (\t, \n, \x1b, \u202e, \\);
-o json and -o yaml are exact. An empty result prints nothing on stdout
(an empty list with -o json|yaml) and one line on stderr.`

// newRoot builds the command tree writing to stdout and stderr.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "hostlease-gc",
		Short: "reclaims addresses leaked by failed CNI chains, and shows what the node holds",
		Long: "hostlease-gc: reclaims addresses leaked by failed CNI chains, and shows what the node holds.\n\n" +
			"`run` is the node daemon (the DaemonSet runs it); the other commands are for a person at the node.\n\n" + exitCodesHelp,
		Example: `  hostlease-gc status
  hostlease-gc leaks --node-name "$(hostname)"
  hostlease-gc doctor
  hostlease-gc completion bash > /etc/bash_completion.d/hostlease-gc`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			// Reached only without a known command: a bad command line.
			c.SetOut(stderr)
			_ = c.Usage()
			if len(args) == 0 {
				return fmt.Errorf("%w: no command given", errUsage)
			}
			return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
		},
		PersistentPreRunE: checkFiniteFlags,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetUsageTemplate(root.UsageTemplate() + `{{if .HasParent}}
Exit status: see 'hostlease-gc --help'.
{{end}}`)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v", errUsage, err)
	})
	root.AddCommand(
		runCmd(stderr),
		statusCmd(stdout, stderr),
		listCmd(stdout, stderr),
		leaksCmd(stdout, stderr),
		releaseCmd(stdout, stderr),
		auditCmd(stdout, stderr),
		importCmd(stdout),
		exportCmd(stdout),
		rebuildCmd(stdout),
		installCNICmd(stdout, stderr),
		doctorCmd(stdout, stderr),
		probeCmd(stdout),
		versionCmd(stdout),
	)
	return root
}

// noArgs refuses any positional argument (exit status 2).
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (this command takes flags only)", errUsage, args[0])
	}
	return nil
}

func versionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "print the version",
		Example: "  hostlease-gc version",
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(stdout, versionString())
			return err
		},
	}
}
