package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

func versionString() string {
	return fmt.Sprintf("hostlease-gc %s (%s)", gc.Version, runtime.Version())
}

// flagSet makes a command's flag set that reports errors instead of exiting.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hostlease-gc "+name, flag.ContinueOnError)
	// The flag package prints its parse errors (which quote a mistyped flag
	// name raw) to its output: discard them; parse returns the error and
	// realMain prints it escaped. Only the help text goes to stderr.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		for _, c := range commands() {
			if c.name == name {
				fmt.Fprintf(stderr, "usage: hostlease-gc %s\n\n%s.\n\nFlags:\n", c.usage, c.summary)
			}
		}
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		fmt.Fprint(stderr, exitCodesHelp)
	}
	return fs
}

// parse parses flags, turning a bad flag into a usage error. No number flag
// of any command means anything as NaN or an infinity: those are refused
// here, naming the flag; ranges are each command's to check.
//
// The help text is printed for -h/--help only; a parse error prints the
// error and the usage line (realMain), not the whole help.
func parse(fs *flag.FlagSet, args []string) error {
	help := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = help
	if err != nil {
		if err == flag.ErrHelp {
			help()
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || bad != nil {
			return
		}
		if v, ok := g.Get().(float64); ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
			bad = fmt.Errorf("%w: --%s must be a finite number, got %v", errUsage, f.Name, v)
		}
	})
	return bad
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (`release 10.0.0.5 --yes`, as the usage line shows
// it), which the flag package alone stops at. Everything after "--" is
// positional. It returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// outputFlag registers -o/--output.
func outputFlag(fs *flag.FlagSet) *string {
	o := new(string)
	fs.StringVar(o, "o", "table", "output format: table or json")
	fs.StringVar(o, "output", "table", "output format: table or json")
	return o
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return fmt.Errorf("%w: -o must be table or json, got %q", errUsage, o)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns. Every cell is escaped: a tab, newline or
// terminal escape stored in a pod name or a file cannot forge a row or a
// column, or reach the terminal.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = escape(c)
		}
		fmt.Fprintln(tw, strings.Join(esc, "\t"))
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	return tw.Flush()
}

// age prints a duration the way kubectl does: 45s, 12m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dataDirFlag registers --data-dir.
func dataDirFlag(fs *flag.FlagSet) *string {
	return fs.String("data-dir", gc.DefaultDataDir, "directory holding the plugin's <network>.db stores (the ipam dataDir, when the config names one)")
}

// checkDir verifies that the directory a flag names exists and is a directory:
// a mistyped path must not read as "no allocations" or receive new files.
func checkDir(flagName, dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: %s must not be empty", errUsage, flagName)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: no such directory", flagName, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flagName, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s: not a directory", flagName, dir)
	}
	return nil
}

// checkNetwork verifies a --network value is a name the plugin accepts: it
// names a file and a directory, so it must never be a path.
func checkNetwork(name string) error {
	if !allocator.ValidNetworkName(name) {
		return fmt.Errorf("%w: --network %q is not a network name (letters, digits, '_', '.', '-'; starting with a letter or digit)", errUsage, name)
	}
	return nil
}

// flagGiven reports whether the named flag was given on the command line.
func flagGiven(f *flag.FlagSet, name string) bool {
	given := false
	f.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return given
}

// checkCRIEndpoint verifies --cri-endpoint names a unix socket (the only
// transport CRI runtimes serve and gc.DialCRI speaks), before anything else
// is looked at.
func checkCRIEndpoint(endpoint string) error {
	switch {
	case endpoint == "":
		return fmt.Errorf("%w: --cri-endpoint must not be empty", errUsage)
	case strings.Contains(endpoint, "://") && !strings.HasPrefix(endpoint, "unix://"),
		endpoint == "unix://":
		return fmt.Errorf("%w: --cri-endpoint %q: only unix:// endpoints (or a socket path) are supported", errUsage, endpoint)
	}
	return nil
}
