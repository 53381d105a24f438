package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Helpers that only tests use live under internal/testing/; neither shipped
// binary links any of them.
func TestBinariesDoNotLinkTestHelpers(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	for _, pkg := range []string{".", "../ipam"} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/hostlease/hostlease/internal/testing/") {
				t.Errorf("%s depends on %s, a test helper", pkg, dep)
			}
		}
	}
}
