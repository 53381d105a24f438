package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/testbin"
)

// The image hack/image.sh builds without docker (what the e2e suites import
// with ctr): the layout the manifests expect, no shell, and reproducible.

// imageArchive is a docker-archive tarball as hack/image.sh writes it.
type imageArchive struct {
	repoTags []string
	config   struct {
		Architecture, OS string
		Created          string
		Config           struct {
			Entrypoint, Cmd, Env []string
			User, WorkingDir     string
		}
	}
	files map[string]*tar.Header // every entry of every layer, by absolute path
	data  map[string][]byte      // contents of regular files
}

func readImageArchive(t *testing.T, path string) imageArchive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[h.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(blobs["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, blobs["manifest.json"])
	}
	var a imageArchive
	a.repoTags = manifest[0].RepoTags
	if err := json.Unmarshal(blobs[manifest[0].Config], &a.config); err != nil {
		t.Fatalf("config %s: %v", manifest[0].Config, err)
	}
	a.files, a.data = map[string]*tar.Header{}, map[string][]byte{}
	for _, l := range manifest[0].Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blobs[l]))
		if err != nil {
			t.Fatalf("layer %s: %v", l, err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l, err)
			}
			p := "/" + strings.TrimSuffix(h.Name, "/")
			a.files[p] = h
			if h.Typeflag == tar.TypeReg {
				a.data[p], _ = io.ReadAll(lr)
			}
		}
	}
	return a
}

// buildImage runs hack/image.sh's hostlease recipe and returns the digest it
// reports and the archive's sha256.
func buildImage(t *testing.T, name, out, plugin, gcBin string) (digest, fileSum string) {
	t.Helper()
	cmd := exec.Command("bash", "../hack/image.sh", "hostlease", name, out, plugin, gcBin)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/image.sh: %v\n%s", err, b)
	}
	m := regexp.MustCompile(`digest (sha256:[0-9a-f]{64})`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("hack/image.sh printed no digest:\n%s", b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return string(m[1]), hex.EncodeToString(s[:])
}

func TestImageBuiltWithoutDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image tool (go-containerregistry) and the binaries")
	}
	bin := t.TempDir()
	if err := testbin.Build(bin, map[string]string{"hostlease": testbin.Plugin, "hostlease-gc": testbin.GC}); err != nil {
		t.Fatal(err)
	}
	plugin, gcBin := filepath.Join(bin, "hostlease"), filepath.Join(bin, "hostlease-gc")
	const name = "localhost/hostlease/hostlease:test"
	out := t.TempDir()

	// Reproducible: two builds of the same inputs are the same bytes and
	// the same image; another plugin is another image.
	d1, s1 := buildImage(t, name, filepath.Join(out, "1.tar"), plugin, gcBin)
	d2, s2 := buildImage(t, name, filepath.Join(out, "2.tar"), plugin, gcBin)
	if d1 != d2 || s1 != s2 {
		t.Errorf("two builds of the same inputs differ: digest %s vs %s, archive sha256 %s vs %s", d1, d2, s1, s2)
	}
	other := filepath.Join(bin, "hostlease-other")
	pb, _ := os.ReadFile(plugin)
	if err := os.WriteFile(other, append(pb, "x"...), 0o755); err != nil {
		t.Fatal(err)
	}
	if d3, _ := buildImage(t, name, filepath.Join(out, "3.tar"), other, gcBin); d3 == d1 {
		t.Errorf("a different plugin gave the same image digest %s", d3)
	}

	a := readImageArchive(t, filepath.Join(out, "1.tar"))
	if !slices.Equal(a.repoTags, []string{name}) {
		t.Errorf("RepoTags %q, want [%s] (the name ctr imports it as)", a.repoTags, name)
	}
	c := a.config.Config
	if !slices.Equal(c.Entrypoint, []string{"/hostlease-gc"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("entrypoint %q cmd %q, want [/hostlease-gc] [run] (as the Dockerfile)", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532" || c.WorkingDir != "/" {
		t.Errorf("user %q workdir %q, want 65532 (distroless nonroot) and /", c.User, c.WorkingDir)
	}
	if a.config.OS != "linux" || a.config.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("os %q created %q, want linux and the epoch", a.config.OS, a.config.Created)
	}

	// The binaries, exactly, executable.
	for p, src := range map[string]string{"/hostlease": plugin, "/hostlease-gc": gcBin} {
		want, _ := os.ReadFile(src)
		h := a.files[p]
		if h == nil || !bytes.Equal(a.data[p], want) || h.Mode&0o777 != 0o755 || h.Uid != 0 {
			t.Errorf("%s: header %+v, %d bytes; want the built binary, 0755, root", p, h, len(a.data[p]))
		}
	}
	// The distroless-static equivalent base: users, /tmp, no shell at all.
	if h := a.files["/tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory 1777", h)
	}
	if !strings.Contains(string(a.data["/etc/passwd"]), "nonroot:x:65532:65532:") ||
		!strings.Contains(string(a.data["/etc/passwd"]), "root:x:0:0:") ||
		!strings.Contains(string(a.data["/etc/group"]), "nonroot:x:65532:") {
		t.Errorf("/etc/passwd, /etc/group lack root and nonroot(65532):\n%s%s", a.data["/etc/passwd"], a.data["/etc/group"])
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil && a.files["/etc/ssl/certs/ca-certificates.crt"] == nil {
		t.Errorf("the machine has Debian's CA bundle but the image does not")
	}
	for p, h := range a.files {
		base := filepath.Base(p)
		if base == "sh" || base == "bash" || base == "busybox" || strings.HasPrefix(p, "/bin") || strings.HasPrefix(p, "/busybox") ||
			h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			t.Errorf("image holds %s (type %c): no shell, no busybox, no links", p, h.Typeflag)
		}
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s has mtime %v, want the epoch", p, h.ModTime)
		}
	}
}
