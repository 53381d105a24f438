package gcintegration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hostlease/hostlease/internal/fakecri"
)

// The fake runtime and its vocabulary, under the names these tests use.
type (
	fakeCRI     = fakecri.Server
	fakeSandbox = fakecri.Sandbox
)

const (
	listNormal = fakecri.ListNormal
	listFail   = fakecri.ListFail
	listHang   = fakecri.ListHang
	listEmpty  = fakecri.ListEmpty
)

// startFakeCRI serves a fake runtime until the test ends. The socket lives in
// a short temporary directory: unix socket paths are limited to 108 bytes and
// t.TempDir() paths of long test names exceed that.
func startFakeCRI(t testing.TB) *fakeCRI {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := fakecri.New(filepath.Join(dir, "cri.sock"))
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}
