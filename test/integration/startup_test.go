package integration

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// The plugin runs on one P from early in its initialisation (internal/oneproc),
// before the packages that allocate at init: the CNI libraries, encoding/json,
// bbolt and hostlease's own. Moved after them (into main, say), resizing costs
// ~20 more page faults per exec; dropped, every call in a burst of pod starts
// costs ~0.35 ms more CPU (docs/benchmarks.md, "One P").
func TestPluginRunsOnOnePFromEarlyInit(t *testing.T) {
	cmd := exec.Command(hostleaseBin())
	cmd.Env = []string{"CNI_COMMAND=VERSION", "GODEBUG=inittrace=1"}
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("VERSION: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	const oneproc = "github.com/hostlease/hostlease/internal/oneproc"
	// Lines are "init <package> @<start> ms, ...", in the order packages
	// were initialised.
	var order []string
	for line := range strings.Lines(stderr.String()) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			order = append(order, f[1])
		}
	}
	at := -1
	for i, pkg := range order {
		if pkg == oneproc {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatalf("%s never initialised (not imported by the plugin?); init order:\n%s", oneproc, strings.Join(order, "\n"))
	}
	for _, pkg := range order[:at] {
		for _, late := range []string{"github.com/", "go.etcd.io/", "encoding/json", "log/slog", "regexp"} {
			if strings.HasPrefix(pkg, late) {
				t.Errorf("%s initialised before %s: it allocates on more than one P", pkg, oneproc)
			}
		}
	}
}
