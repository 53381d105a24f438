package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fmt"
	"runtime"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// Every command that reads a data dir refuses one that does not exist or is
// not a directory, naming the flag, with exit status 1: a typo must never
// read as "nothing allocated".
func TestMissingDataDirFailsEveryCommand(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cri := startCRI(t)
	for _, dir := range []struct{ path, why string }{{missing, "no such directory"}, {file, "not a directory"}} {
		for _, args := range [][]string{
			{"list"},
			{"list", "-o", "json"},
			{"list", "--network", "alpha"},
			{"status"},
			{"status", "-o", "json"},
			{"leaks", "--no-api", "--cri-endpoint", cri.Endpoint()},
			{"release", "10.0.0.1", "--yes"},
			{"release", "--sandbox", "x", "--yes"},
			{"audit"},
			{"import", "--network", "alpha"},
			{"export", "--network", "alpha"},
			{"rebuild", "--network", "alpha", "--cri-endpoint", cri.Endpoint()},
		} {
			args = append(args, "--data-dir", dir.path)
			r := gcExec(t, args...)
			if r.code != exitFailed || !strings.Contains(r.stderr, "--data-dir "+dir.path+": "+dir.why) || strings.TrimSpace(r.stdout) != "" {
				t.Errorf("%q: want exit 1 naming --data-dir (%s) and nothing on stdout\n%s", args, dir.why, r)
			}
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a command created the missing data dir")
	}
}

// status shows an unreadable store as an ERROR row and exits 1, in both
// output formats; an empty (existing) data dir is fine.
func TestStatusErrorRowExitsNonZero(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "good", dataDir: dataDir, rangeSets: subnets("10.85.0.0/24")}
	add(t, n, "sandbox-a")
	if r := gcExec(t, "status", "--data-dir", dataDir); r.code != 0 {
		t.Fatalf("status of a healthy store: %s", r)
	}
	if err := os.WriteFile(store.FilePath(dataDir, "broken"), []byte("this is not a bbolt file, not at all, no"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"table", "json"} {
		r := gcExec(t, "status", "--data-dir", dataDir, "-o", format)
		if r.code != exitFailed || !strings.Contains(r.stdout, "broken") || !strings.Contains(r.stdout, "good") ||
			!strings.Contains(r.stderr, "1 store(s) could not be read") {
			t.Errorf("status -o %s with an unreadable store: want both networks shown and exit 1\n%s", format, r)
		}
	}
	empty := t.TempDir()
	if r := gcExec(t, "status", "--data-dir", empty); r.code != 0 || !strings.Contains(r.stderr, "no stores found under") {
		t.Errorf("status of an empty data dir: %s", r)
	}
}

// Flag values that parse but mean nothing are refused, naming the flag, with
// the usage exit status.
func TestAbsurdFlagValues(t *testing.T) {
	dataDir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"leaks", "--no-api", "--max-reclaim-fraction", "NaN"}, "--max-reclaim-fraction"},
		{[]string{"leaks", "--no-api", "--max-reclaim-fraction", "+Inf"}, "--max-reclaim-fraction"},
		{[]string{"leaks", "--no-api", "--max-reclaim-fraction", "-0.5"}, "--max-reclaim-fraction"},
		{[]string{"leaks", "--no-api", "--misses", "-3"}, "--misses"},
		{[]string{"leaks", "--no-api", "--min-age", "-1s"}, "--min-age"},
		{[]string{"leaks", "--no-api", "--cri-endpoint", "tcp://127.0.0.1:1"}, "--cri-endpoint"},
		{[]string{"leaks", "--no-api", "--cri-endpoint", ""}, "--cri-endpoint"},
		{[]string{"rebuild", "--network", "x", "--cri-endpoint", ""}, "--cri-endpoint"},
		{[]string{"rebuild", "--network", "x", "--cri-endpoint", "http://runtime"}, "--cri-endpoint"},
		{[]string{"release", "fe80::1%eth0", "--yes"}, `"fe80::1%eth0" is not an IP address`},
		{[]string{"release", "10.0.0.300", "--yes"}, `"10.0.0.300" is not an IP address`},
		{[]string{"list", "--network", "../etc"}, "--network"},
		{[]string{"list", "--network", "a\nb"}, "--network"},
		{[]string{"status", "-o", "xml"}, "-o must be table, wide, json or yaml"},
		{[]string{"audit", "--limit", "0"}, "--limit must be between 1 and"},
		{[]string{"audit", "--limit", "-5"}, "--limit must be between 1 and"},
		{[]string{"audit", "--limit", "1000000000"}, "--limit must be between 1 and"},
		{[]string{"list", "--data-dir", ""}, "--data-dir must not be empty"},
		{[]string{"list", "--\x1b[2Jbogus"}, `unknown flag: --\x1b[2Jbogus`},
		{[]string{"status", "--data-dir"}, "flag needs an argument: --data-dir"},
	} {
		args := append([]string{}, tc.args...)
		if !strings.Contains(strings.Join(args, " "), "--data-dir") {
			args = append(args, "--data-dir", dataDir)
		}
		r := gcExec(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "usage: hostlease-gc "+args[0]) {
			t.Errorf("%q: want exit 2 naming %q with the usage line\n%s", args, tc.want, r)
		}
		assertTerminalSafe(t, strings.Join(args, " "), r.stderr)
	}
}

// The exit codes are documented where an operator looks: the table once in
// the top-level help, and a pointer to it in every command's --help, each on
// stdout with exit 0 and with examples.
func TestExitCodesDocumentedInHelp(t *testing.T) {
	r := gcExec(t, "--help")
	for _, want := range []string{"Exit status", "0  done", "1  failed", "2  bad command line", "3  done and every store was read", "4  import done", "Examples:"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) || r.stderr != "" {
			t.Errorf("--help: want exit 0 and %q in the help on stdout\n%s", want, r)
		}
	}
	for _, args := range [][]string{{"list", "--help"}, {"status", "-h"}, {"leaks", "--help"}, {"release", "--help"},
		{"export", "--help"}, {"import", "--help"}, {"rebuild", "--help"}, {"audit", "--help"}, {"doctor", "--help"}, {"run", "--help"},
		{"install-cni", "--help"}, {"help", "list"}} {
		r := gcExec(t, args...)
		for _, want := range []string{"Examples:", "Exit status: see 'hostlease-gc --help'", "--data-dir"} {
			if args[0] == "install-cni" && want == "--data-dir" {
				continue
			}
			if r.code != 0 || !strings.Contains(r.stdout, want) || r.stderr != "" {
				t.Errorf("%q: want exit 0 and %q in the help on stdout\n%s", args, want, r)
				break
			}
		}
		if strings.Contains(r.stdout, "0  done") {
			t.Errorf("%q: the exit status table belongs in the top-level help only\n%s", args, r.stdout)
		}
	}
	b, err := os.ReadFile("../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## CLI", "Exit status", "| 3 |", "| 4 |"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("docs/runbook.md has no %q", want)
		}
	}
}

// An environment error is not damage: a store path that is a symlink (the
// plugin never follows one) is reported by list and status (exit 1), and
// rebuild refuses to touch it, even with --force.
func TestRebuildNeverActsOnEnvironmentErrors(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "real", dataDir: dataDir, rangeSets: subnets("10.91.0.0/24")}
	add(t, n, "sandbox-a")
	link := store.FilePath(dataDir, "linked")
	if err := os.Symlink(store.FilePath(dataDir, "real"), link); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, "list", "--data-dir", dataDir); r.code != exitFailed || !strings.Contains(r.stderr, "network linked") {
		t.Errorf("list with a symlinked store:\n%s", r)
	}
	if r := gcExec(t, "status", "--data-dir", dataDir); r.code != exitFailed || !strings.Contains(r.stdout, "ERROR") {
		t.Errorf("status with a symlinked store:\n%s", r)
	}
	cri := startCRI(t)
	for _, force := range []bool{false, true} {
		args := []string{"rebuild", "--data-dir", dataDir, "--network", "linked", "--cri-endpoint", cri.Endpoint()}
		if force {
			args = append(args, "--force")
		}
		r := gcExec(t, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "not rebuilding") || !strings.Contains(r.stderr, "not damage") {
			t.Errorf("%q: want a refusal saying it is not damage\n%s", args, r)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("rebuild replaced the symlink: %v %v", fi, err)
		}
		if m, _ := filepath.Glob(filepath.Join(dataDir, "*.corrupt-*")); len(m) != 0 {
			t.Errorf("rebuild set a store aside for an environment error: %v", m)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"status", "-o", "xml"}, `-o must be table, wide, json or yaml, got "xml"`},
		{[]string{"list", "--data-dir", dir, "--output", "csv"}, `-o must be table, wide, json or yaml, got "csv"`},
		{[]string{"leaks", "-o", "toml"}, `-o must be table, wide, json or yaml`},
		{[]string{"run", "--interval", "soon"}, `invalid argument "soon" for "--interval" flag`},
		{[]string{"import", "--data-dir", dir}, "--network is required"},
		{[]string{"export", "--data-dir", dir}, "--network is required"},
		{[]string{"rebuild", "--data-dir", dir}, "--network is required"},
		{[]string{"release", "--data-dir", dir}, "give exactly one of IP or --sandbox ID"},
		{[]string{"release", "--data-dir", dir, "not-an-ip"}, `"not-an-ip" is not an IP address`},
		// A flag value that parses but is out of range is a usage error too.
		{[]string{"run", "--max-reclaim-fraction", "2", "--no-api"}, "--max-reclaim-fraction must be"},
		{[]string{"run", "--interval", "0s", "--no-api"}, "--interval must be"},
		{[]string{"leaks", "--misses", "0", "--no-api"}, "--misses must be"},
	} {
		_, errOut, code := cli(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "usage: hostlease-gc "+tc.args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q and the usage line", tc.args, code, errOut, tc.want)
		}
	}
}

func TestCommandsAndVersion(t *testing.T) {
	out, _, code := cli(t, "version")
	if want := fmt.Sprintf("hostlease-gc dev (%s)\n", runtime.Version()); code != 0 || out != want {
		t.Errorf("version: exit %d %q, want %q", code, out, want)
	}
	_, errOut, code := cli(t, "frobnicate")
	if code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) || !strings.Contains(errOut, "release") {
		t.Errorf("unknown command: exit %d %q, want 2 with the command list", code, errOut)
	}
	if _, errOut, code := cli(t); code != 2 || !strings.Contains(errOut, "Available Commands:") {
		t.Errorf("no command: exit %d %q, want 2 with usage", code, errOut)
	}
	if out, _, code := cli(t, "--help"); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("--help: exit %d %q, want 0 with usage", code, out)
	}
	if out, _, code := cli(t, "list", "-h"); code != 0 || !strings.Contains(out, "-d, --data-dir") {
		t.Errorf("list -h: exit %d %q, want 0 with the flags", code, out)
	}
}
