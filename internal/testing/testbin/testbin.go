// Package testbin builds the binaries that tests exec — the project's own
// commands and the reference CNI plugins they run beside — so that every test
// package builds them the same way: CGO disabled (static, like the release),
// without VCS stamping, all at once.
package testbin

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Import paths of the binaries tests build, keyed by the name they are
// installed under (a CNI plugin's name is its file name).
const (
	Plugin     = "github.com/hostlease/hostlease/cmd/ipam"
	GC         = "github.com/hostlease/hostlease/cmd/ipam-gc"
	FailPlugin = "github.com/hostlease/hostlease/e2e/failplugin"
	HostLocal  = "github.com/containernetworking/plugins/plugins/ipam/host-local"
	Bridge     = "github.com/containernetworking/plugins/plugins/main/bridge"
	Loopback   = "github.com/containernetworking/plugins/plugins/main/loopback"
)

// Build builds every package of bins (file name → import path) into dir, in
// parallel, and returns every build's error joined (with the compiler's
// output). dir must exist.
func Build(dir string, bins map[string]string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, pkg := range bins {
		wg.Go(func() {
			cmd := exec.Command(goBin, "build", "-buildvcs=false", "-o", filepath.Join(dir, name), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("go build %s: %v\n%s", pkg, err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// BuildTemp makes a temporary directory named after prefix and builds bins
// into it. The caller removes the directory (also when err is not nil and dir
// is not empty).
func BuildTemp(prefix string, bins map[string]string) (dir string, err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	return dir, Build(dir, bins)
}

// Main is the body of a TestMain for a package whose tests exec bins: it
// builds them into a temporary directory, sets *dir to it, runs the tests and
// removes the directory; it returns the exit code. A failed build fails the
// package before any test runs, naming it (name) and the compiler's output.
//
//	func TestMain(m *testing.M) { os.Exit(testbin.Main(m, "faultinject", bins, &binDir)) }
func Main(m *testing.M, name string, bins map[string]string, dir *string) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	d, err := BuildTemp("hostlease-"+name+"-bin-", bins)
	if d != "" {
		defer os.RemoveAll(d)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: building binaries: %v\n", name, err)
		return 1
	}
	*dir = d
	return m.Run()
}

// CNITool is the reference CNI command-line runtime. Its module's go.mod
// (cobra) is not this project's, so Install builds it.
const CNITool = "github.com/containernetworking/cni/cnitool"

// Install builds pkg, a command of module, into dir with `go install
// pkg@version` at the version of module this project's go.mod requires: a
// build outside this module, resolved by the command's own go.mod, for the
// reference tools whose dependencies this project does not require. It must
// run inside this module (a test's working directory is).
func Install(dir, module, pkg string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		return fmt.Errorf("go list -m %s: %v", module, err)
	}
	version := string(bytes.TrimSpace(out))
	cmd := exec.Command(goBin, "install", "-buildvcs=false", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install %s@%s: %v\n%s", pkg, version, err, out)
	}
	return nil
}
