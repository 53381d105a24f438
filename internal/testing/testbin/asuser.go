package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Nobody is the unprivileged user (and group) tests plant files as.
const Nobody = 65534

// AsNobody runs name with args as uid and gid Nobody with no supplementary
// groups (setpriv(1)), as another user of the node would, and fails the
// test if it fails. It skips the test when the test does not run as root
// (only root can switch users) or setpriv is missing.
func AsNobody(t testing.TB, name string, args ...string) {
	t.Helper()
	NeedRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv(1) not found")
	}
	cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--", name}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s %v: %v\n%s", Nobody, name, args, err, out)
	}
}

// NeedRoot skips the test unless it runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: plants files as another user")
	}
}

// OpenTempDir is a new temporary directory (owned by the test's user, mode
// 0755) that every user can reach: t.TempDir makes its directories 0700.
func OpenTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// StickyDir is a new directory like /tmp: owned by the test's user,
// writable by everyone, sticky (mode 1777).
func StickyDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(OpenTempDir(t), "sticky")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}
