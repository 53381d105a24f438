package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hostlease/hostlease/internal/testing/testbin"
)

// ModulePath is the project's module path; RepoRoot looks for its go.mod.
const ModulePath = "github.com/hostlease/hostlease"

// PauseImage is the name the cached pause archive imports as.
const PauseImage = "localhost/hostlease/pause:e2e"

// Artifacts are the cached, prebuilt pieces hack/e2e-setup.sh produces.
type Artifacts struct {
	Cache      string  // the cache dir (HOSTLEASE_CACHE or /var/cache/hostlease-e2e)
	Version    Version // the containerd version of Containerd, Shim and Ctr
	Containerd string  // containerd binary
	Shim       string  // containerd-shim-runc-v2 binary
	Ctr        string  // ctr binary
	CNIBinDir  string  // dir with bridge, loopback, host-local
	PauseTar   string  // OCI archive of PauseImage
	Runc       string  // runc (from apt)
}

// CacheDir returns ${HOSTLEASE_CACHE:-/var/cache/hostlease-e2e}.
func CacheDir() string {
	if d := os.Getenv("HOSTLEASE_CACHE"); d != "" {
		return d
	}
	return "/var/cache/hostlease-e2e"
}

// ContainerdBinDir is where hack/e2e-setup.sh caches containerd v.
func ContainerdBinDir(cache string, v Version) string {
	return filepath.Join(cache, "containerd", v.String(), "bin")
}

func artifactsIn(cache string, v Version) Artifacts {
	bin := ContainerdBinDir(cache, v)
	a := Artifacts{
		Cache:      cache,
		Version:    v,
		Containerd: filepath.Join(bin, "containerd"),
		Shim:       filepath.Join(bin, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(bin, "ctr"),
		CNIBinDir:  filepath.Join(cache, "cni-bin"),
		PauseTar:   filepath.Join(cache, "pause.tar"),
	}
	a.Runc, _ = exec.LookPath("runc")
	return a
}

// missing lists the artifacts that are not there.
func (a Artifacts) missing() []string {
	var out []string
	for _, p := range []string{a.Containerd, a.Shim, a.Ctr, a.PauseTar,
		filepath.Join(a.CNIBinDir, "bridge"), filepath.Join(a.CNIBinDir, "loopback"),
		filepath.Join(a.CNIBinDir, "host-local")} {
		if _, err := os.Stat(p); err != nil {
			out = append(out, p)
		}
	}
	if a.Runc == "" {
		out = append(out, "runc (on PATH)")
	}
	return out
}

var (
	artifactsOnce sync.Once
	artifactsVal  Artifacts
	artifactsErr  error
)

// EnsureArtifacts runs hack/e2e-setup.sh once per process for the selected
// containerd version (SelectedVersion; the script only checks its cache when
// everything is built, and rebuilds what is missing or stale) and returns the
// artifacts. The script's output goes to stderr, so a first, slow run is
// visible in `go test -v`. Set HOSTLEASE_E2E_SKIP_SETUP=1 to use the cache as
// it is, without running the script.
func EnsureArtifacts() (Artifacts, error) {
	artifactsOnce.Do(func() {
		v, err := SelectedVersion()
		if err != nil {
			artifactsErr = err
			return
		}
		a := artifactsIn(CacheDir(), v)
		if os.Getenv("HOSTLEASE_E2E_SKIP_SETUP") == "" {
			root, err := RepoRoot()
			if err != nil {
				artifactsErr = err
				return
			}
			cmd := exec.Command("bash", filepath.Join(root, "hack", "e2e-setup.sh"))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			cmd.Env = append(os.Environ(), "HOSTLEASE_CACHE="+a.Cache, "CONTAINERD_VERSIONS="+v.String())
			if err := cmd.Run(); err != nil {
				artifactsErr = fmt.Errorf("hack/e2e-setup.sh: %w", err)
				return
			}
			a = artifactsIn(a.Cache, v)
		}
		if m := a.missing(); len(m) > 0 {
			artifactsErr = fmt.Errorf("e2e artifacts missing (run hack/e2e-setup.sh as root): %s", strings.Join(m, ", "))
			return
		}
		artifactsVal = a
	})
	return artifactsVal, artifactsErr
}

// RepoRoot finds the directory holding the project's go.mod, walking up from
// the working directory (go test runs in the package dir).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			ok := sc.Scan() && strings.TrimSpace(sc.Text()) == "module "+ModulePath
			f.Close()
			if ok {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the go.mod of " + ModulePath + " above the working directory")
		}
		dir = parent
	}
}

// BuildGoBinary builds a main package (its import path) into out, the way
// every test package builds what it execs (internal/testing/testbin).
func BuildGoBinary(pkg, out string) error {
	return testbin.Build(filepath.Dir(out), map[string]string{filepath.Base(out): pkg})
}

// ProjectBin returns the path of a binary `make build` put into the repo's
// bin/ (e.g. "hostlease", "hostlease-gc"), or an error saying to build it.
func ProjectBin(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not built (run make build): %w", p, err)
	}
	return p, nil
}
