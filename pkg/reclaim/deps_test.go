package reclaim

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// forbiddenDeps are the import paths (each also as a path prefix) the
// package must not depend on outside its tests: the judgement is pure, so
// no store file, RPC, API client, metrics, HTTP or process.
var forbiddenDeps = []string{
	"go.etcd.io/bbolt",
	"google.golang.org/grpc",
	"k8s.io/client-go",
	"k8s.io/cri-api",
	"github.com/prometheus/",
	"net/http",
	"os/exec",
	"github.com/hostlease/hostlease/pkg/allocator/store",
}

func forbidden(path string) bool {
	for _, f := range forbiddenDeps {
		if path == f || strings.HasPrefix(path, strings.TrimSuffix(f, "/")+"/") {
			return true
		}
	}
	return false
}

// TestDependencies checks the package's non-test dependency list (`go list
// -deps`) and names each forbidden import with the packages that import it.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports", ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	type pkg struct {
		ImportPath string
		Imports    []string
	}
	var deps []pkg
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		deps = append(deps, p)
	}
	if len(deps) < 2 {
		t.Fatalf("go list -deps listed %d packages: %s", len(deps), out)
	}
	for _, d := range deps {
		if !forbidden(d.ImportPath) {
			continue
		}
		var by []string
		for _, p := range deps {
			for _, imp := range p.Imports {
				if imp == d.ImportPath || strings.HasSuffix(imp, "/vendor/"+d.ImportPath) {
					by = append(by, p.ImportPath)
				}
			}
		}
		t.Errorf("pkg/reclaim depends on %s (imported by %s): the reclaim judgement must stay free of I/O libraries", d.ImportPath, strings.Join(by, ", "))
	}
}
