package hostlocal

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerbatimCopy checks that this package is host-local's source at the
// version go.mod pins, so validation and messages stay host-local's. When
// go.mod moves to another plugins version, copy the files again.
func TestVerbatimCopy(t *testing.T) {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/containernetworking/plugins").Output()
	if err != nil {
		t.Fatalf("go mod download github.com/containernetworking/plugins: %v", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download: no module dir in %s (%v)", out, err)
	}
	mod := m.Dir
	files := map[string]string{
		"config.go":    "plugins/ipam/host-local/backend/allocator/config.go",
		"range.go":     "plugins/ipam/host-local/backend/allocator/range.go",
		"range_set.go": "plugins/ipam/host-local/backend/allocator/range_set.go",
		"ip/ip.go":     "pkg/ip/ip.go",
		"ip/cidr.go":   "pkg/ip/cidr.go",
	}
	for ours, theirs := range files {
		want, err := os.ReadFile(filepath.Join(mod, theirs))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(ours)
		if err != nil {
			t.Fatal(err)
		}
		w := strings.NewReplacer(
			"\npackage allocator\n", "\npackage hostlocal\n",
			`"github.com/containernetworking/plugins/pkg/ip"`, `"github.com/hostlease/hostlease/internal/hostlocal/ip"`,
		).Replace(string(want))
		if string(got) != w {
			t.Errorf("%s is not a verbatim copy of %s/%s", ours, mod, theirs)
		}
	}
}
