package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/testbin"
)

// The CNI bin dir swapped for a link between install-cni's check and its
// acts: uid 65534, who can write the bin dir's parent, moves it aside,
// copies its own program under the name of the new binary's temporary file
// into a directory of its own, and links that directory in its place.
// install-cni then runs (as root), renames and verifies only what is in the
// directory it checked: the program planted through the link never runs.
func TestInstallCNISwappedDirNeverRunsPlanted(t *testing.T) {
	testbin.NeedRoot(t)
	src, _ := installDirs(t, "")
	base := testbin.OpenTempDir(t)
	parent := filepath.Join(base, "parent")
	to, moved, evil := filepath.Join(parent, "bin"), filepath.Join(parent, "bin.orig"), filepath.Join(parent, "evil")
	for _, d := range []string{parent, to} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(parent, testbin.Nobody, testbin.Nobody); err != nil {
		t.Fatal(err)
	}
	// The planted program: it leaves a mark (running as whoever runs it)
	// and answers VERSION as a plugin of this build would.
	marker := filepath.Join(base, "planted-program-ran")
	planted := filepath.Join(base, "planted")
	script := "#!/bin/sh\necho ran >" + marker + "\necho '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}'\n"
	if err := os.WriteFile(planted, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	installCheckedHook = func() {
		testbin.AsNobody(t, "/bin/sh", "-c", `cd "$1" && mv bin bin.orig && mkdir evil && for f in bin.orig/.hostlease.tmp*; do cp "$2" "evil/${f#bin.orig/}"; done && cp "$2" evil/hostlease && ln -s evil bin`,
			"sh", parent, planted)
	}
	t.Cleanup(func() { installCheckedHook = nil })
	res, err := installCNI(src, to, "hostlease", io.Discard)
	installCheckedHook = nil
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatalf("install-cni ran the program uid %d planted through the swapped-in link (install: %v)", testbin.Nobody, err)
	}
	if names := dirNames(t, evil); len(names) < 2 {
		t.Fatalf("the swap did not plant the temporary file's name: %q", names)
	}
	if err != nil {
		return // refused
	}
	if got, want := sha256File(t, filepath.Join(moved, "hostlease")), sha256File(t, src); got != want || res.sum != want {
		t.Errorf("the checked dir's hostlease has sha256 %s (reported %s), want the source's %s", got, res.sum, want)
	}
	if got := sha256File(t, filepath.Join(evil, "hostlease")); got != sha256File(t, planted) {
		t.Errorf("the planted directory's hostlease was replaced")
	}
}
