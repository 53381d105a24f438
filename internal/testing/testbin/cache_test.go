package testbin

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// With CacheEnv set, packages of one run share one build of a binary: the
// first Build makes it in the cache, later ones copy it, and a test that
// damages its copy damages nobody else's.
func TestBuildSharesOneBuildPerRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	a, b := t.TempDir(), t.TempDir()
	if err := Build(a, map[string]string{"fail": FailPlugin}); err != nil {
		t.Fatal(err)
	}
	cached, _ := filepath.Glob(filepath.Join(cache, "*failplugin"))
	if len(cached) != 1 {
		t.Fatalf("cache %s holds %q, want one failplugin build", cache, cached)
	}
	st, err := os.Stat(cached[0])
	if err != nil {
		t.Fatal(err)
	}
	// The first package's copy is damaged; the second gets the cached build,
	// not a new one (same file, same mtime) and not the damaged copy.
	if err := os.WriteFile(filepath.Join(a, "fail"), []byte("damaged"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Build(b, map[string]string{"fail": FailPlugin}); err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(cached[0])
	if err != nil || !st2.ModTime().Equal(st.ModTime()) || !os.SameFile(st, st2) {
		t.Fatalf("the cached build was made again (%v)", err)
	}
	want, _ := os.ReadFile(cached[0])
	got, _ := os.ReadFile(filepath.Join(b, "fail"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("second package's binary (%d bytes) is not the cached build (%d bytes)", len(got), len(want))
	}
	if fi, err := os.Stat(filepath.Join(b, "fail")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("copy not executable: %v %v", fi, err)
	}
}

// A cache dir others can write is refused: nobody else may plant the
// binaries the tests run as root.
func TestBuildRefusesAnUntrustedCache(t *testing.T) {
	cache := t.TempDir()
	if err := os.Chmod(cache, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Setenv(CacheEnv, cache)
	if err := Build(t.TempDir(), map[string]string{"fail": FailPlugin}); err == nil {
		t.Fatalf("built from a world-writable cache dir %s", cache)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	t.Setenv(CacheEnv, link)
	if err := Build(t.TempDir(), map[string]string{"fail": FailPlugin}); err == nil {
		t.Fatalf("built through a symbolic link %s", link)
	}
}
