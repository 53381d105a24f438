package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/pkg/daemon"
)

// checkFiniteFlags refuses NaN and infinities in every number flag of every
// command, naming the flag: none of them means anything so (ranges are each
// command's to check).
func checkFiniteFlags(c *cobra.Command, _ []string) error {
	var bad error
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if bad != nil || !f.Changed || f.Value.Type() != "float64" {
			return
		}
		if v, err := strconv.ParseFloat(f.Value.String(), 64); err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			bad = fmt.Errorf("%w: --%s must be a finite number, got %v", errUsage, f.Name, v)
		}
	})
	return bad
}

// daemonFlags registers, on c, the daemon's flags (daemon.RegisterRunFlags, the
// one place their names and defaults live) whose names keep says, or all of
// them when keep is nil, with the CLI's short forms.
func daemonFlags(c *cobra.Command, keep map[string]bool) *daemon.Options {
	gfs := flag.NewFlagSet(c.Name(), flag.ContinueOnError)
	o := daemon.RegisterRunFlags(gfs)
	gfs.VisitAll(func(f *flag.Flag) {
		if keep != nil && !keep[f.Name] {
			return
		}
		pf := pflag.PFlagFromGoFlag(f)
		pf.Shorthand = shorthands[f.Name]
		c.Flags().AddFlag(pf)
	})
	return o
}

// shorthands are the one-letter forms, the same in every command that has
// the flag.
var shorthands = map[string]string{"data-dir": "d", "network": "n"}

// dataDirFlag registers --data-dir (-d).
func dataDirFlag(c *cobra.Command) *string {
	return c.Flags().StringP("data-dir", "d", daemon.DefaultDataDir, "directory holding the plugin's <network>.db stores (the ipam dataDir, when the config names one)")
}

// networkFlag registers --network (-n).
func networkFlag(c *cobra.Command, usage string) *string {
	return c.Flags().StringP("network", "n", "", usage)
}

// cliLockTimeout is how long a CLI command waits, by default, for a store's
// lock that a plugin or the daemon holds.
const cliLockTimeout = 10 * time.Second

// lockTimeoutFlag registers --lock-timeout on a command that opens stores:
// how long it waits for a store's lock before it reports the store as
// unreadable (a burst of pod starts on a loaded node holds the lock back to
// back, each ADD for as long as the node lets it run).
func lockTimeoutFlag(c *cobra.Command) *time.Duration {
	d := cliLockTimeout
	c.Flags().Var((*positiveDuration)(&d), "lock-timeout", "how long to wait for a store's lock a plugin or the daemon holds")
	return &d
}

// positiveDuration is a duration flag that refuses zero and negative values
// when parsed (a bad command line, exit status 2).
type positiveDuration time.Duration

func (d *positiveDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v <= 0 {
		return fmt.Errorf("must be more than 0s, got %s", s)
	}
	*d = positiveDuration(v)
	return nil
}

func (d *positiveDuration) String() string { return time.Duration(*d).String() }
func (d *positiveDuration) Type() string   { return "duration" }

// output is how a reading command prints its rows: -o table|wide|json|yaml
// and --no-headers.
type output struct {
	format    string
	noHeaders bool
}

func outputFlags(c *cobra.Command) *output {
	o := &output{}
	c.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table, wide (more columns), json or yaml")
	c.Flags().BoolVar(&o.noHeaders, "no-headers", false, "print table rows without the header line")
	return o
}

func (o *output) check() error {
	switch o.format {
	case "table", "wide", "json", "yaml":
		return nil
	}
	return fmt.Errorf("%w: -o must be table, wide, json or yaml, got %q", errUsage, o.format)
}

// tableFunc builds a table: its header and rows, with more columns if wide.
type tableFunc func(wide bool) (header []string, rows [][]string)

// render prints rows (a slice of the command's JSON row type) as JSON or
// YAML, or else the table tab builds. An empty result is one line on stderr,
// the same for every command ("no <what> found under <where>"), and nothing
// on stdout but the empty list of -o json|yaml.
func (o *output) render(stdout, stderr io.Writer, rows any, n int, tab tableFunc, what, where string) error {
	switch o.format {
	case "json":
		return writeJSON(stdout, rows)
	case "yaml":
		b, err := yaml.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	if n == 0 {
		printf(stderr, "no %s found under %s", what, where)
		return nil
	}
	header, t := tab(o.format == "wide")
	if o.noHeaders {
		header = nil
	}
	return table(stdout, header, t)
}

// table writes aligned columns, with no trailing blanks. Every cell is
// escaped (a tab, newline or terminal escape stored in a pod name or a file
// cannot forge a row or a column, or reach the terminal) and an empty cell
// prints as "-". A nil header writes the rows alone.
func table(w io.Writer, header []string, rows [][]string) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = orDash(escape(c))
		}
		fmt.Fprintln(tw, strings.Join(esc, "\t"))
	}
	if header != nil {
		line(header)
	}
	for _, r := range rows {
		line(r)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for l := range strings.Lines(buf.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(l, " \n")); err != nil {
			return err
		}
	}
	return nil
}
