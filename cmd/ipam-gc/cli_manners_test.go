package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/pkg/daemon"
)

// The CLI behaves as the tools around it (kubectl, helm): help on stdout
// with exit 0, so that `hostlease-gc --help | grep leaks` finds the verb.
func TestHelpGoesToStdout(t *testing.T) {
	buildBinaries(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		cmd := exec.Command("sh", append([]string{"-c", `"$0" "$@" | grep -q leaks`, filepath.Join(binDir, "hostlease-gc")}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("hostlease-gc %s | grep leaks: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// A positional argument a verb does not take is a usage error (exit 2),
// never silently ignored.
func TestStrayArgumentsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"status", "extra-arg", "-d", dir},
		{"list", "/some/dir", "-d", dir},
		{"audit", "x", "-d", dir},
		{"leaks", "x", "--no-api", "-d", dir},
		{"import", "x", "-n", "a", "-d", dir},
		{"export", "x", "-n", "a", "-d", dir},
		{"rebuild", "x", "-n", "a", "-d", dir},
		{"doctor", "x"},
		{"run", "x"},
		{"version", "x"},
	} {
		r := gcExec(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, `unexpected argument "`) || strings.TrimSpace(r.stdout) != "" {
			t.Errorf("%q: want exit 2 naming the stray argument\n%s", args, r)
		}
	}
}

// Each verb lists its own flags only: the daemon's listener, interval and
// logging flags are run's, not leaks' (which ignored them).
func TestPerVerbFlags(t *testing.T) {
	daemonOnly := []string{"--interval", "--dry-run", "--metrics-addr", "--http-max-connections", "--http-read-header-timeout",
		"--http-read-timeout", "--http-write-timeout", "--http-idle-timeout", "--http-max-header-bytes", "--log-format", "--log-level"}
	leaks := gcExec(t, "leaks", "--help")
	run := gcExec(t, "run", "--help")
	for _, f := range daemonOnly {
		if strings.Contains(leaks.stdout, f) {
			t.Errorf("leaks --help lists the daemon-only %s", f)
		}
		if !strings.Contains(run.stdout, f) {
			t.Errorf("run --help lacks %s", f)
		}
	}
	for _, f := range []string{"--misses", "--grace", "--min-age", "--netns-grace", "--max-reclaim-fraction", "--cri-endpoint", "-d, --data-dir", "--node-name", "--no-api", "--netns-dir"} {
		if !strings.Contains(leaks.stdout, f) {
			t.Errorf("leaks --help lacks %s:\n%s", f, leaks.stdout)
		}
	}
	if r := gcExec(t, "leaks", "--no-api", "--interval", "5s"); r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag: --interval") {
		t.Errorf("leaks --interval: want a usage error\n%s", r)
	}
	// Single-dash long flags are not flags (GNU style, as pflag reads them).
	if r := gcExec(t, "status", "-data-dir", t.TempDir()); r.code != exitUsage {
		t.Errorf("status -data-dir: want a usage error\n%s", r)
	}
}

// -o yaml and -o wide, --no-headers, one empty-result message, no unnamed
// column and no trailing blanks.
func TestOutputFormats(t *testing.T) {
	f := newFixture(t)
	if r := gcExec(t, "release", "-d", f.dir, "-n", "alpha", f.alpha[f.ids["cccc3333"]].String(), "-y"); r.code != 0 {
		t.Fatal(r) // an audit entry
	}
	r := gcExec(t, "status", "-d", f.dir, "-o", "yaml")
	var pools []daemon.PoolRow
	if err := yaml.UnmarshalStrict([]byte(r.stdout), &pools); err != nil || r.code != 0 || len(pools) != 3 || pools[2].Size != "17" || pools[0].Used != 2 {
		t.Errorf("status -o yaml: %v %+v\n%s", err, pools, r)
	}
	for _, verb := range []string{"status", "list", "audit"} {
		for _, format := range []string{"table", "wide"} {
			r := gcExec(t, verb, "-d", f.dir, "-o", format)
			if r.code != 0 {
				t.Fatalf("%s -o %s: %s", verb, format, r)
			}
			for l := range strings.Lines(r.stdout) {
				if strings.HasSuffix(strings.TrimSuffix(l, "\n"), " ") {
					t.Errorf("%s -o %s: line with trailing blanks: %q", verb, format, l)
				}
			}
			header := strings.SplitN(r.stdout, "\n", 2)[0]
			cells := strings.Split(header, "  ")
			if slices.Contains(cells, "") && strings.HasSuffix(header, " ") {
				t.Errorf("%s -o %s: unnamed column in %q", verb, format, header)
			}
			nh := gcExec(t, verb, "-d", f.dir, "-o", format, "--no-headers")
			if nh.code != 0 || strings.Contains(nh.stdout, "NETWORK") || strings.Count(nh.stdout, "\n") != strings.Count(r.stdout, "\n")-1 {
				t.Errorf("%s -o %s --no-headers: want the rows without the header\n%s", verb, format, nh)
			}
		}
	}
	if h := strings.SplitN(gcExec(t, "status", "-d", f.dir).stdout, "\n", 2)[0]; !strings.HasSuffix(h, "NOTE") {
		t.Errorf("status header %q: want its last column named", h)
	}
	if w := gcExec(t, "list", "-d", f.dir, "-o", "wide"); !strings.Contains(w.stdout, f.ids["aaaa1111"]) || !strings.Contains(w.stdout, "POD-UID") {
		t.Errorf("list -o wide: want whole sandbox IDs and the pod UID\n%s", w)
	}

	// One message for an empty result, on stderr; stdout empty (or an empty
	// list for -o json|yaml).
	empty := t.TempDir()
	cri := startCRI(t)
	for _, args := range [][]string{{"status"}, {"list"}, {"audit"}, {"leaks", "--no-api", "--cri-endpoint", cri.Endpoint()}} {
		r := gcExec(t, append(args, "-d", empty)...)
		if r.code != 0 || r.stdout != "" || !strings.HasPrefix(r.stderr, "no ") || !strings.HasSuffix(r.stderr, " found under "+empty+"\n") {
			t.Errorf("%q on an empty data dir: want exit 0, nothing on stdout and \"no ... found under DIR\" on stderr\n%s", args, r)
		}
		for _, format := range []string{"json", "yaml"} {
			r := gcExec(t, append(args, "-d", empty, "-o", format)...)
			if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
				t.Errorf("%q -o %s on an empty data dir: want []\n%s", args, format, r)
			}
		}
	}
}

// JSON rows: no internal version key, ages as whole seconds (numbers), pool
// sizes as strings.
func TestJSONRowValues(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "js", dataDir: dataDir, rangeSets: subnets("10.88.0.0/24")}
	add(t, n, "sandbox-gone")
	cri := startCRI(t)
	r := gcExec(t, "list", "-d", dataDir, "-o", "json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("list -o json: %v\n%s", err, r)
	}
	if _, ok := list[0]["v"]; ok {
		t.Errorf("list -o json carries the store's internal version key \"v\": %v", list[0])
	}
	r = gcExec(t, "leaks", "--no-api", "-d", dataDir, "--cri-endpoint", cri.Endpoint(), "-o", "json")
	var leaks []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &leaks); err != nil || len(leaks) != 1 {
		t.Fatalf("leaks -o json: %v\n%s", err, r)
	}
	if a, ok := leaks[0]["ageSeconds"].(float64); !ok || a < 0 || a != float64(int64(a)) {
		t.Errorf("leaks -o json: ageSeconds %#v, want whole seconds as a number", leaks[0]["ageSeconds"])
	}
	r = gcExec(t, "status", "-d", dataDir, "-o", "json")
	var pools []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &pools); err != nil || len(pools) != 1 {
		t.Fatalf("status -o json: %v\n%s", err, r)
	}
	if pools[0]["size"] != "253" || pools[0]["free"] != "252" {
		t.Errorf("status -o json: size %#v free %#v, want the strings \"253\" and \"252\"", pools[0]["size"], pools[0]["free"])
	}
}

// Shell completion for the shells operators use.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := gcExec(t, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "hostlease-gc") || len(r.stdout) < 500 {
			t.Errorf("completion %s: %s", shell, r)
		}
	}
	r := gcExec(t, "__complete", "st")
	if r.code != 0 || !strings.Contains(r.stdout, "status") {
		t.Errorf("completing \"st\": %s", r)
	}
}
