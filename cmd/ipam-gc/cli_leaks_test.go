package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/fakecri"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// Without a usable CRI answer leaks cannot tell a leak from a live pod: it
// says so and exits 1, and never prints "no leak candidates" (nor an empty
// JSON list) — whether the runtime is unreachable, fails the call, or
// answers with no sandboxes while committed allocations exist.
func TestLeaksWithoutUsableCRIFails(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "lk", dataDir: dataDir, rangeSets: subnets("10.86.0.0/24")}
	add(t, n, "sandbox-a")
	// A committed record (imported from host-local): an empty list from CRI
	// is then implausible.
	hl := t.TempDir()
	if err := os.MkdirAll(filepath.Join(hl, "lk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hl, "lk", "10.86.0.200"), []byte("old-sandbox\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, "import", "--data-dir", dataDir, "--network", "lk", "--host-local-dir", hl); r.code != 0 {
		t.Fatal(r)
	}

	failing := startCRI(t)
	failing.SetMode(fakecri.ListFail)
	empty := startCRI(t)
	empty.SetMode(fakecri.ListEmpty)
	for _, tc := range []struct{ name, endpoint, why string }{
		{"unreachable", "unix://" + filepath.Join(t.TempDir(), "no-runtime.sock"), "ListPodSandbox"},
		{"failing", failing.Endpoint(), "ListPodSandbox"},
		{"empty answer", empty.Endpoint(), "returned no sandboxes while 1 committed allocations exist"},
	} {
		for _, format := range []string{"table", "json"} {
			r := gcExec(t, "leaks", "--no-api", "--data-dir", dataDir, "--cri-endpoint", tc.endpoint, "-o", format)
			if r.code != exitFailed || !strings.Contains(r.stderr, "CRI answer not usable") || !strings.Contains(r.stderr, tc.why) ||
				!strings.Contains(r.stderr, "cannot tell which addresses leaked") {
				t.Errorf("leaks, CRI %s, -o %s: want exit 1 saying why\n%s", tc.name, format, r)
			}
			if strings.Contains(r.stdout, "no leak candidates") || strings.TrimSpace(r.stdout) == "[]" {
				t.Errorf("leaks, CRI %s, -o %s: claims there are no leaks\n%s", tc.name, format, r)
			}
		}
	}
	// --all still shows every record, each with why nothing would be reclaimed.
	r := gcExec(t, "leaks", "--no-api", "--all", "--data-dir", dataDir, "--cri-endpoint", failing.Endpoint())
	if r.code != exitFailed || strings.Count(r.stdout, "cri_unavailable")+strings.Count(r.stdout, "CRI did not answer") < 2 {
		t.Errorf("leaks --all without CRI: want every record with the reason\n%s", r)
	}
}

// At a node shell (no NODE_NAME, no --node-name, no --no-api) leaks answers:
// one line on stderr says what the API view adds and how to get it, the
// candidates come from the stores and CRI. A live (READY) sandbox's address is
// not a candidate; an absent sandbox's is, its hostile pod name escaped.
func TestLeaksOnNodeShellCarriesOnWithoutAPI(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "shell", dataDir: dataDir, rangeSets: subnets("10.87.0.0/24")}
	live := add(t, n, "sandbox-live")[0]
	gone := cniExec(t, n, pluginCall{plugin: "hostlease", command: "ADD", containerID: "sandbox-gone",
		podNamespace: "default", podName: "web\x1b[2J\nforged", podUID: "uid-gone"})[0]
	cri := startCRI(t)
	cri.Ready("sandbox-live", live)

	r := gcExec(t, "leaks", "--data-dir", dataDir, "--cri-endpoint", cri.Endpoint())
	if r.code != 0 {
		t.Fatalf("leaks on a node shell: %s", r)
	}
	note := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(note) != 1 || !strings.Contains(note[0], "--node-name") || !strings.Contains(note[0], "live pod") || !strings.Contains(note[0], "--no-api") {
		t.Errorf("leaks on a node shell: want one stderr line saying what the API view adds and how to enable it\n%s", r)
	}
	assertTerminalSafe(t, "leaks", r.stdout)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NETWORK") ||
		!strings.HasPrefix(lines[1], "shell    "+gone.String()+"  default/web\\x1b[2J\\nforged  sandbox-gone") {
		t.Errorf("leaks: want exactly the absent sandbox's %s as a candidate (escaped pod name), not %s\n%s", gone, live, r.stdout)
	}

	r = gcExec(t, "leaks", "--no-api", "--data-dir", dataDir, "--cri-endpoint", cri.Endpoint(), "-o", "json")
	got, err := daemon.DecodeRows[daemon.LeakRow]([]byte(r.stdout))
	if err != nil || r.code != 0 || strings.TrimSpace(r.stderr) != "" {
		t.Fatalf("leaks --no-api -o json: %v\n%s", err, r)
	}
	if len(got) != 1 || got[0].IP != gone.String() || got[0].Pod != "default/web\x1b[2J\nforged" {
		t.Errorf("leaks -o json: %+v", got)
	}

	// An unreadable store is named and fails the command, candidates of the
	// others still shown.
	if err := os.WriteFile(filepath.Join(dataDir, "broken.db"), []byte("not a store at all, really not"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = gcExec(t, "leaks", "--no-api", "--data-dir", dataDir, "--cri-endpoint", cri.Endpoint())
	if r.code != exitFailed || !strings.Contains(r.stderr, "network broken") || !strings.Contains(r.stdout, gone.String()) {
		t.Errorf("leaks with an unreadable store: want exit 1 naming it, the other candidates shown\n%s", r)
	}
}
