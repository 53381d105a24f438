package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// install-cni, run as the DaemonSet's init container runs it: the real
// hostlease-gc installing the real plugin into a temporary CNI bin dir.

// installDirs makes a plugin source (a copy of the built plugin, plus extra
// trailing bytes when extra is not empty: still the same working ELF, but
// another file) and an empty, trusted bin dir.
func installDirs(t *testing.T, extra string) (src, dir string) {
	t.Helper()
	buildBinaries(t)
	tmp := t.TempDir()
	plugin, err := os.ReadFile(filepath.Join(binDir, "hostlease"))
	if err != nil {
		t.Fatal(err)
	}
	src = filepath.Join(tmp, "hostlease-src")
	if err := os.WriteFile(src, append(plugin, extra...), 0o700); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(tmp, "cni-bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return src, dir
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// dirNames lists a directory's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestInstallCNIInstallsAndVerifies(t *testing.T) {
	src, dir := installDirs(t, "")
	r := gcExec(t, "install-cni", "--from="+src, "--to="+dir)
	if r.code != 0 {
		t.Fatalf("install-cni failed:\n%v", r)
	}
	installed := filepath.Join(dir, "hostlease")
	sum := sha256File(t, src)
	if got := sha256File(t, installed); got != sum {
		t.Errorf("installed file has sha256 %s, the source %s", got, sum)
	}
	st, err := os.Lstat(installed)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
		t.Errorf("installed mode %v, want a regular file 0755", st.Mode())
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("bin dir holds %q, want only hostlease (no temp file left)", names)
	}
	// The report names what was checked: the content and the versions the
	// installed binary answered.
	for _, want := range []string{installed, sum, "1.1.0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	// --name installs under another file name.
	r = gcExec(t, "install-cni", "--from="+src, "--to="+dir, "--name=hostlease-v2")
	if r.code != 0 || sha256File(t, filepath.Join(dir, "hostlease-v2")) != sum {
		t.Errorf("--name=hostlease-v2: %v", r)
	}
}

// An upgrade renames a new file over the old one: whoever holds the old
// binary open (a runtime exec'ing it) keeps reading the complete old file,
// and the old inode is never written.
func TestInstallCNIReplacesByRename(t *testing.T) {
	src, dir := installDirs(t, "")
	installed := filepath.Join(dir, "hostlease")
	oldContent := []byte("old plugin binary\n")
	if err := os.WriteFile(installed, oldContent, 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(installed)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldInfo, _ := held.Stat()

	if r := gcExec(t, "install-cni", "--from="+src, "--to="+dir); r.code != 0 {
		t.Fatalf("install-cni failed:\n%v", r)
	}
	st, err := os.Stat(installed)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(st, heldInfo) {
		t.Errorf("%s is the same inode as before: the binary was rewritten in place", installed)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(held); err != nil || !bytes.Equal(buf.Bytes(), oldContent) {
		t.Errorf("the old binary, held open, now reads %d bytes (%v), want its old content", buf.Len(), err)
	}
	if sha256File(t, installed) != sha256File(t, src) {
		t.Errorf("installed file is not the source")
	}
}

// While installs alternate two binaries, a runtime looking at the installed
// path (reading it whole, executing it) only ever finds one of them,
// complete and working.
func TestInstallCNIRuntimeSeesOnlyCompleteBinaries(t *testing.T) {
	srcA, dir := installDirs(t, "")
	srcB := filepath.Join(filepath.Dir(srcA), "hostlease-src-b")
	b, err := os.ReadFile(srcA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srcB, append(b, "another build"...), 0o700); err != nil {
		t.Fatal(err)
	}
	known := map[string]string{sha256File(t, srcA): "A", sha256File(t, srcB): "B"}
	installed := filepath.Join(dir, "hostlease")
	if r := gcExec(t, "install-cni", "--from="+srcA, "--to="+dir); r.code != 0 {
		t.Fatalf("first install failed:\n%v", r)
	}

	stop := make(chan struct{})
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex // guards the counters, violations and seen
		looks, execs int
		violations   []string
		seen         = map[string]bool{}
	)
	violate := func(s string) { // with mu held
		if len(violations) < 10 {
			violations = append(violations, s)
		}
	}
	wg.Go(func() { // reads the installed file whole, over and over
		for {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(installed)
			sum := sha256.Sum256(data)
			name, ok := known[hex.EncodeToString(sum[:])]
			mu.Lock()
			looks++
			switch {
			case err != nil:
				violate(fmt.Sprintf("read: %v", err))
			case !ok:
				violate(fmt.Sprintf("read %d bytes that are neither binary (partially written?)", len(data)))
			default:
				seen[name] = true
			}
			mu.Unlock()
		}
	})
	wg.Go(func() { // executes it as a runtime does (CNI VERSION)
		for {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.Command(installed)
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
			cmd.Stdin = strings.NewReader(`{"cniVersion":"1.1.0"}`)
			out, err := cmd.CombinedOutput()
			mu.Lock()
			execs++
			if err != nil || !strings.Contains(string(out), "supportedVersions") {
				violate(fmt.Sprintf("exec: %v: %.200s", err, out))
			}
			mu.Unlock()
		}
	})
	for i := range 10 {
		src := srcB
		if i%2 == 1 {
			src = srcA
		}
		if r := gcExec(t, "install-cni", "--from="+src, "--to="+dir); r.code != 0 {
			t.Errorf("install %d failed:\n%v", i, r)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("installed file read %d times and executed %d times during 10 installs", looks, execs)
	for _, v := range violations {
		t.Errorf("runtime's view of %s: %s", installed, v)
	}
	if !seen["A"] || !seen["B"] {
		t.Errorf("the readers saw %v, want both binaries", seen)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("bin dir holds %q, want only hostlease", names)
	}
}

// A directory another user controls, or a link, is refused before anything
// is written: the error names the path, what is wrong and the fix.
func TestInstallCNIRefusesUntrustedDir(t *testing.T) {
	src, dir := installDirs(t, "")
	tmp := filepath.Dir(dir)
	link := filepath.Join(tmp, "link-to-bin")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, to string
		setup    func(t *testing.T)
		want     []string
	}{
		{"symlink", link, nil, []string{link, "is a symlink", "fix: name the directory itself"}},
		{"other-writable", dir, func(t *testing.T) { chmod(t, dir, 0o757) }, []string{dir, "writable by others", "0757", "fix: chmod 0755"}},
		{"group-writable", dir, func(t *testing.T) { chmod(t, dir, 0o775) }, []string{dir, "writable by group", "0775", "fix: chmod 0755"}},
		{"other owner", dir, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chown(dir, 0, 0) })
		}, []string{dir, "uid 65534", "chown 0"}},
		{"not a directory", src, nil, []string{src, "not a directory"}},
		{"missing", filepath.Join(tmp, "nope"), nil, []string{filepath.Join(tmp, "nope"), "no such file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			chmod(t, dir, 0o755)
			if c.setup != nil {
				c.setup(t)
			}
			t.Cleanup(func() { chmod(t, dir, 0o755) })
			r := gcExec(t, "install-cni", "--from="+src, "--to="+c.to)
			if r.code != 1 {
				t.Errorf("exit %d, want 1:\n%v", r.code, r)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("%s holds %q after a refused install", dir, names)
			}
		})
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

// An installed name that is a link is replaced, not written through: the
// file it pointed to keeps its content.
func TestInstallCNIReplacesLinkNotTarget(t *testing.T) {
	src, dir := installDirs(t, "")
	victim := filepath.Join(filepath.Dir(dir), "victim")
	if err := os.WriteFile(victim, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	installed := filepath.Join(dir, "hostlease")
	if err := os.Symlink(victim, installed); err != nil {
		t.Fatal(err)
	}
	if r := gcExec(t, "install-cni", "--from="+src, "--to="+dir); r.code != 0 {
		t.Fatalf("install-cni failed:\n%v", r)
	}
	if b, _ := os.ReadFile(victim); string(b) != "not yours" {
		t.Errorf("the link's target now reads %.40q: written through the link", b)
	}
	if st, err := os.Lstat(installed); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is %v (%v), want the regular plugin file", installed, st.Mode(), err)
	}
}

// A source that is not a working plugin of this build never replaces the
// installed one: exit 1 naming what failed, the old binary in place, no temp
// file left.
func TestInstallCNIRefusesBrokenPlugin(t *testing.T) {
	_, dir := installDirs(t, "")
	tmp := filepath.Dir(dir)
	installed := filepath.Join(dir, "hostlease")
	good := []byte("the working plugin\n")
	if err := os.WriteFile(installed, good, 0o755); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	truncated := filepath.Join(tmp, "truncated")
	plugin, _ := os.ReadFile(filepath.Join(binDir, "hostlease"))
	if err := os.WriteFile(truncated, plugin[:len(plugin)/2], 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, src, want string }{
		{"truncated ELF", truncated, "CNI VERSION"},
		{"prints nothing", script("silent", "exit 0"), "CNI VERSION"},
		{"fails", script("fails", `echo '{"code":999,"msg":"broken"}'; exit 1`), "broken"},
		{"old spec only", script("old", `echo '{"cniVersion":"0.4.0","supportedVersions":["0.3.1","0.4.0"]}'`), "lacks spec version 1.1.0"},
		{"missing", filepath.Join(tmp, "nope"), "no such file"},
		{"a directory", dir, "not a regular file"},
	}
	link := filepath.Join(tmp, "plugin-link")
	if err := os.Symlink(filepath.Join(binDir, "hostlease"), link); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ name, src, want string }{"symlink", link, "symbolic link"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := gcExec(t, "install-cni", "--from="+c.src, "--to="+dir)
			if r.code != 1 {
				t.Errorf("exit %d, want 1:\n%v", r.code, r)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, r.stderr)
			}
			if b, _ := os.ReadFile(installed); !bytes.Equal(b, good) {
				t.Errorf("the installed binary changed to %d bytes", len(b))
			}
			if names := dirNames(t, dir); len(names) != 1 {
				t.Errorf("bin dir holds %q, want only hostlease", names)
			}
		})
	}
}

func TestInstallCNIUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus"},
		{"extra-arg"},
		{"--name=../hostlease"},
		{"--name=.hidden"},
		{"--name="},
		{"--to="},
	} {
		r := gcExec(t, append([]string{"install-cni"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "usage: hostlease-gc install-cni") {
			t.Errorf("install-cni %q: want exit 2 with the usage line:\n%v", args, r)
		}
	}
	r := gcExec(t, "install-cni", "--help")
	for _, f := range []string{"--from", "/hostlease", "--to", "/host/opt/cni/bin", "--name"} {
		if !strings.Contains(r.stdout, f) {
			t.Errorf("--help lacks %q:\n%s", f, r.stdout)
		}
	}
}
