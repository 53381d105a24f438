package oneproc

import (
	"runtime"
	"testing"
)

// The package's whole contract: once it is initialised, the process runs on
// one P.
func TestImportSetsOneP(t *testing.T) {
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("GOMAXPROCS = %d after importing oneproc, want 1", n)
	}
}
