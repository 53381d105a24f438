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
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hostlease/hostlease/internal/trustfs"
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

// CacheEnv names a directory that every test package of one run shares
// for the binaries Build makes: the first package to need one builds it
// there (under a lock), the others copy it. hack/test.sh sets it to a new
// directory for each make test and removes it after: the tree must not
// change while it is set. Unset, each package builds its own.
const CacheEnv = "HOSTLEASE_TESTBIN_CACHE"

// Build builds every package of bins (file name → import path) into dir, in
// parallel, and returns every build's error joined (with the compiler's
// output). dir must exist. With CacheEnv set, a binary already built in this
// run is copied from there instead.
func Build(dir string, bins map[string]string) error {
	cache := os.Getenv(CacheEnv)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, pkg := range bins {
		wg.Go(func() {
			var err error
			if cache == "" {
				err = goBuild(filepath.Join(dir, name), pkg)
			} else {
				err = fromCache(cache, filepath.Join(dir, name), pkg)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// goBuild builds pkg into out as every test binary is built: static
// (CGO_ENABLED=0), without VCS stamping.
func goBuild(out, pkg string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-buildvcs=false", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// fromCache copies pkg's binary from the run's cache dir to out, building it
// there first if no package of this run has (one builder at a time per
// binary: the lock is an flock on a file beside it, held across processes).
// The cache dir must pass trustfs's checks (not a link, owned by this user
// or root, not writable by group or others), so that nobody else can plant
// a binary the tests then run as root. A copy, not a link: a test may
// damage its binary.
func fromCache(cache, out, pkg string) error {
	d, err := trustfs.OpenDir(cache)
	if err != nil {
		return fmt.Errorf("%s: %w", CacheEnv, err)
	}
	defer d.Close()
	key := strings.NewReplacer("/", "_", ".", "_").Replace(pkg)
	lock, err := d.OpenFile(key+".lock", os.O_RDWR|os.O_CREATE)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %v", lock.Name(), err)
	}
	bin := filepath.Join(d.Path(), key)
	if _, err := os.Lstat(bin); errors.Is(err, os.ErrNotExist) {
		if err := goBuild(bin+".tmp", pkg); err != nil {
			return err
		}
		if err := os.Rename(bin+".tmp", bin); err != nil {
			return err
		}
	}
	return copyFile(bin, out)
}

// copyFile copies src to dst as go build writes its output: a new file
// renamed over dst (a dst being executed is replaced, not written).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	_, err = io.Copy(o, in)
	if err == nil {
		err = o.Chmod(0o755)
	}
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.Name(), dst)
	}
	if err != nil {
		os.Remove(o.Name())
	}
	return err
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
