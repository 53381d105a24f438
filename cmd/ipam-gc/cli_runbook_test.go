package main

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runbookCommands returns the hostlease-gc command lines of the ```sh
// blocks of docs/runbook.md's section "### heading", in order.
func runbookCommands(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n### "+heading+"\n")
	if start < 0 {
		t.Fatalf("docs/runbook.md has no section %q", heading)
	}
	section := doc[start+1:]
	if end := regexp.MustCompile(`\n#{2,3} `).FindStringIndex(section[4:]); end != nil {
		section = section[:end[0]+4]
	}
	var out []string
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
		case strings.HasPrefix(line, "```"):
			inBlock = false
		case inBlock && strings.HasPrefix(line, "hostlease-gc "):
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("section %q lists no hostlease-gc command", heading)
	}
	return out
}

// runRunbook runs one runbook command line as written, by sh, with the
// section's variables set and the built hostlease-gc first in PATH; it
// fails the test unless the command exits 0.
func runRunbook(t *testing.T, line, network, dataDir string) string {
	t.Helper()
	buildBinaries(t)
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Env = []string{"PATH=" + binDir + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + t.TempDir(),
		// The network's ipam config sets dataDir: the store and
		// host-local's files are both under it.
		"NETWORK=" + network, "DATA_DIR=" + dataDir, "HOST_LOCAL_DIR=" + dataDir}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("runbook command %q: %v\nstdout:\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// The runbook's three procedures, tried as written: the hostlease-gc
// commands each lists run by sh exactly as printed, the conflist switches
// they describe made by calling the other plugin with the same config
// (ipamNet.conf), and pods started by the plugin in charge at every step,
// also in the windows the procedures leave (between the two exports). No
// address is ever held by two pods, every command exits 0, and at the end
// the store holds every running pod's address for that pod.
func TestRunbookProcedures(t *testing.T) {
	dataDir := t.TempDir()
	n := ipamNet{name: "rbk", dataDir: dataDir, rangeSets: subnets("10.81.0.0/24")}
	holder := map[netip.Addr]string{}
	start := func(plugin, id string) {
		t.Helper()
		for _, ip := range cniExec(t, n, pluginCall{plugin: plugin, command: "ADD", containerID: id}) {
			if prev, ok := holder[ip]; ok {
				t.Errorf("%s gave %s to %s while %s holds it", plugin, ip, id, prev)
			}
			holder[ip] = id
		}
	}
	stop := func(plugin, id string) {
		t.Helper()
		cniExec(t, n, pluginCall{plugin: plugin, command: "DEL", containerID: id})
		for ip, h := range holder {
			if h == id {
				delete(holder, ip)
			}
		}
	}
	run := func(heading string, between map[int]func()) {
		t.Helper()
		for i, line := range runbookCommands(t, heading) {
			if f := between[i]; f != nil {
				f()
			}
			out := runRunbook(t, line, n.name, dataDir)
			if strings.Contains(line, " import ") && !strings.Contains(out, "; 0 conflict(s)") {
				t.Errorf("%s: %q found conflicts:\n%s", heading, line, out)
			}
		}
	}

	// Under host-local.
	start("host-local", "hl-1")
	start("host-local", "hl-2")
	stop("host-local", "hl-1")
	start("host-local", "hl-3")

	run("Migrate from host-local", nil)
	start("hostlease", "hs-1")
	stop("hostlease", "hl-2") // host-local's reservation, now freed by hostlease
	start("hostlease", "hs-2")

	rollback := runbookCommands(t, "Roll back to host-local")
	if len(rollback) != 2 {
		t.Fatalf("Roll back to host-local lists %d commands, want the two exports: %q", len(rollback), rollback)
	}
	// A pod started by hostlease between the two exports (before the
	// conflist switch), one stopped there too.
	run("Roll back to host-local", map[int]func(){1: func() {
		start("hostlease", "window-1")
		stop("hostlease", "hs-1")
	}})
	start("host-local", "hl-4")
	stop("host-local", "hs-2") // hostlease's reservation, freed by host-local
	start("host-local", "hl-5")

	// Returned: the plugin in charge again before the procedure's commands
	// run (a pod may start as soon as the conflist names hostlease).
	start("hostlease", "back-1")
	run("Return to hostlease", nil)
	start("hostlease", "back-2")
	stop("hostlease", "hl-4")
	start("hostlease", "back-3")

	recs := (&fixture{dir: dataDir}).records(t, n.name)
	for ip, id := range holder {
		if r, ok := recs[ip]; !ok || r.ContainerID != id {
			t.Errorf("after the procedures the store holds %s for %q, want %s", ip, r.ContainerID, id)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, n.name, "lock")); err != nil {
		t.Errorf("host-local never ran in %s: %v", filepath.Join(dataDir, n.name), err)
	}
}
