package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/daemon"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"default/web-1", "default/web-1"},
		{"with space", "with space"},
		{"ünïcödé/名前", "ünïcödé/名前"},
		{"a\tb", `a\tb`},
		{"row\nforged 10.0.0.9", `row\nforged 10.0.0.9`},
		{"cr\rx", `cr\rx`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"bell\x07", `bell\a`},
		{"del\x7f", `del\x7f`},
		{"c1\u0085", `c1\u0085`},
		{"bidi\u202eevil", `bidi\u202eevil`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"line\u2028sep", `line\u2028sep`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`back\slash`, `back\\slash`},
		{`\x1b`, `\\x1b`}, // stored literally: not confusable with an escape
	} {
		if got := escape(tc.in); got != tc.want {
			t.Errorf("escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// hostile values reach the store the ways they really do: pod names from the
// runtime's CNI_ARGS (through the real plugin), owner IDs and ifnames from
// host-local files (through import), network names from file names under the
// data dir. No table or message may print them raw; JSON keeps them exact.
func TestTextOutputEscapesStoredValues(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "esc", dataDir: dataDir, rangeSets: subnets("10.81.0.0/24")}
	hostilePod := "web\x1b[2J\x1b[31m\tforged\n10.81.0.99  esc  pwned\r\u202eevil"
	cniExec(t, n, pluginCall{plugin: "hostlease", command: "ADD", containerID: "sandbox-hostile",
		podNamespace: "default", podName: hostilePod, podUID: "uid-1"})
	add(t, n, "sandbox-plain")

	// host-local state with a hostile owner and ifname, imported into a second network.
	hl := t.TempDir()
	if err := os.MkdirAll(filepath.Join(hl, "imp"), 0o755); err != nil {
		t.Fatal(err)
	}
	hostileID := "id\x1b]0;title\x07\nforged-row"
	if err := os.WriteFile(filepath.Join(hl, "imp", "10.82.0.5"), []byte(hostileID+"\r\neth\x1b[1m0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, "import", "--data-dir", dataDir, "--network", "imp", "--host-local-dir", hl); r.code != 0 {
		t.Fatalf("import: %s", r)
	}
	r := gcExec(t, "list", "--data-dir", dataDir)
	if r.code != 0 {
		t.Fatalf("list: %s", r)
	}
	assertTerminalSafe(t, "list", r.stdout)
	assertTerminalSafe(t, "list stderr", r.stderr)
	rows := assertAligned(t, r.stdout, 3) // esc: 2, imp: 1
	var sawPod, sawID bool
	for _, row := range rows {
		sawPod = sawPod || row[2] == `default/web\x1b[2J\x1b[31m\tforged\n10.81.0.99  esc  pwned\r\u202eevil`
		// The sandbox column shows the first 13 bytes of the owner, escaped.
		sawID = sawID || row[3] == `id\x1b]0;title\a\n` && row[4] == `eth\x1b[1m0`
	}
	if !sawPod || !sawID {
		t.Errorf("list does not show the escaped pod name (%v), host-local owner and ifname (%v):\n%s", sawPod, sawID, r.stdout)
	}

	// JSON stays exact.
	r = gcExec(t, "list", "--data-dir", dataDir, "-o", "json")
	recs, _, err := daemon.DecodeList([]byte(r.stdout))
	if err != nil || r.code != 0 {
		t.Fatalf("list -o json: %v\n%s", err, r)
	}
	var exactPod, exactID bool
	for _, rec := range recs {
		exactPod = exactPod || rec.PodName == hostilePod
		exactID = exactID || rec.ContainerID == hostileID && rec.IfName == "eth\x1b[1m0"
	}
	if !exactPod || !exactID {
		t.Errorf("list -o json does not carry the stored values exactly (pod %v, host-local owner %v):\n%s", exactPod, exactID, r.stdout)
	}

	r = gcExec(t, "release", "--data-dir", dataDir, "--network", "esc", "--sandbox", "sandbox-hostile", "--yes")
	if r.code != 0 {
		t.Fatalf("release: %s", r)
	}
	assertTerminalSafe(t, "release", r.stdout)
	if !strings.Contains(r.stdout, `held by pod default/web\x1b[2J`) {
		t.Errorf("release does not show the escaped pod name:\n%s", r.stdout)
	}
	r = gcExec(t, "audit", "--data-dir", dataDir, "--network", "esc")
	assertTerminalSafe(t, "audit", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, `default/web\x1b[2J`) || !strings.Contains(r.stdout, "manual-release") {
		t.Errorf("audit does not show the release with the escaped pod name:\n%s", r)
	}

	// Errors that carry a path or a name are escaped too.
	if err := os.WriteFile(filepath.Join(dataDir, "bad\x1b[8mnet.db"), []byte("not a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = gcExec(t, "list", "--data-dir", dataDir)
	assertTerminalSafe(t, "list stderr, unreadable store", r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, `network bad\x1b[8mnet:`) {
		t.Errorf("list with an unreadable store named with an escape:\n%s", r)
	}
	r = gcExec(t, "status", "--data-dir", dataDir)
	assertTerminalSafe(t, "status", r.stdout)
	if r.code != 1 || !strings.Contains(r.stdout, `bad\x1b[8mnet`) {
		t.Errorf("status with an unreadable store named with an escape:\n%s", r)
	}
	r = gcExec(t, "list", "--data-dir", dataDir+"/no\x1b[2Jsuch")
	assertTerminalSafe(t, "list error", r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, `no\x1b[2Jsuch: no such directory`) {
		t.Errorf("list of a missing dir with an escape in its name:\n%s", r)
	}
}
