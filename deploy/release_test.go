package deploy_test

// `make release` (hack/release.sh), run as an operator would, and every
// artefact it writes opened as its consumer opens it: the tarballs' binaries
// run (or, for the other architecture, are static ELF files of that
// machine), the packaged chart renders with the real helm, the OCI archive's
// layout is read blob by blob, sha256sums verify, the rendered manifest is
// kustomize's build of deploy/base; a second run writes the same bytes.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const releaseImage = "ghcr.io/hostlease/hostlease"

var releaseArches = []string{"amd64", "arm64"}

// The chart version rule of hack/release.sh: Helm needs SemVer, git
// describe is not.
func TestReleaseChartVersionRule(t *testing.T) {
	for _, tc := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-rc.1", "1.2.3-rc.1"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-5-gabc1234", "1.2.3+5.gabc1234"},
		{"v1.2.3-rc.1-5-gabc1234-dirty", "1.2.3-rc.1+5.gabc1234.dirty"},
		{"84d9ba3", "0.0.0-g84d9ba3"},
		{"0123456", "0.0.0-g0123456"},
		{"84d9ba3-dirty", "0.0.0-g84d9ba3+dirty"},
		{"v01.2.3", ""},
		{"release-1", ""},
		{"dev", ""},
	} {
		out, err := exec.Command("bash", "../hack/release.sh", "--semver", tc.describe).Output()
		got := strings.TrimSpace(string(out))
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: mapped to %q, want a refusal", tc.describe, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.describe, got, err, tc.want)
		}
	}
}

// ReleaseRefEnv names a directory holding a release of this very tree
// built by another `make release` (hack/test.sh sets it to the one
// hack/setup.sh built, after checking its tree stamp): TestRelease's build
// must equal it byte for byte. Unset, TestRelease builds the second release
// itself.
const ReleaseRefEnv = "HOSTLEASE_RELEASE_REF"

// runRelease runs `make release DIST=dist` in the repository (the version
// is the Makefile's, from git describe).
func runRelease(t *testing.T, dist string) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "release", "DIST="+dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
}

func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both architectures, the image tool and helm")
	}
	out, err := exec.Command("git", "-C", "..", "describe", "--tags", "--match", "v[0-9]*", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	version := strings.TrimSpace(string(out))
	out, err = exec.Command("bash", "../hack/release.sh", "--semver", version).Output()
	if err != nil {
		t.Fatalf("hack/release.sh --semver %s: %v", version, err)
	}
	chartVersion := strings.TrimSpace(string(out))

	dist := t.TempDir()
	runRelease(t, dist)

	tarballs := map[string]string{}
	for _, a := range releaseArches {
		tarballs[a] = fmt.Sprintf("hostlease-%s-linux-%s.tar.gz", version, a)
	}
	imageFile := "hostlease-" + version + "-image.oci.tar"
	chartFile := "hostlease-" + chartVersion + ".tgz"
	manifestFile := "hostlease-" + version + ".yaml"
	want := []string{tarballs["amd64"], tarballs["arm64"], imageFile, chartFile, manifestFile, "sha256sums"}
	var got []string
	entries, _ := os.ReadDir(dist)
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s holds %q, want %q", dist, got, want)
	}

	t.Run("sha256sums", func(t *testing.T) { checkSums(t, dist, want) })
	bins := map[string]map[string][]byte{} // arch -> name -> contents
	for _, a := range releaseArches {
		bins[a] = checkBinaryTarball(t, filepath.Join(dist, tarballs[a]), version, a)
	}
	t.Run("image", func(t *testing.T) { checkOCIArchive(t, filepath.Join(dist, imageFile), version, bins) })
	t.Run("chart", func(t *testing.T) { checkChartPackage(t, filepath.Join(dist, chartFile), chartVersion, version) })
	t.Run("manifest", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(dist, manifestFile))
		if err != nil {
			t.Fatal(err)
		}
		compareObjects(t, "kustomize build base", build(t, "base"),
			decodeDocs(t, manifestFile, withDevTag(t, string(b), version)))
	})

	// Reproducible: a second release of the same tree is the same bytes.
	// make test hands over the one its setup built of this tree (another
	// process, another time) instead of building a second one here.
	dist2 := os.Getenv(ReleaseRefEnv)
	if dist2 == "" {
		dist2 = t.TempDir()
		runRelease(t, dist2)
	} else {
		t.Logf("second release: %s (%s)", dist2, ReleaseRefEnv)
	}
	s1, _ := os.ReadFile(filepath.Join(dist, "sha256sums"))
	s2, _ := os.ReadFile(filepath.Join(dist2, "sha256sums"))
	if !bytes.Equal(s1, s2) {
		t.Errorf("two releases of the same tree differ:\n%s\n%s", s1, s2)
	}
}

// withDevTag checks that stream names the release's image exactly twice
// (the init container and the daemon) and returns it with the repository's
// placeholder tag instead, for comparison with deploy/base.
func withDevTag(t *testing.T, stream, version string) string {
	t.Helper()
	ref := releaseImage + ":" + version
	if n := strings.Count(stream, ref); n != 2 {
		t.Errorf("%s appears %d times, want 2 (install-cni and hostlease-gc)", ref, n)
	}
	if strings.Contains(stream, releaseImage+":dev") {
		t.Errorf("the release still names %s:dev", releaseImage)
	}
	return strings.ReplaceAll(stream, ref, releaseImage+":dev")
}

// checkSums verifies sha256sums as `sha256sum -c` would, and that it lists
// every other artefact.
func checkSums(t *testing.T, dist string, files []string) {
	b, err := os.ReadFile(filepath.Join(dist, "sha256sums"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, name, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("sha256sums line %q", l)
		}
		data, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if s := sha256.Sum256(data); hex.EncodeToString(s[:]) != sum {
			t.Errorf("%s: sha256 %x, sha256sums says %s", name, s, sum)
		}
		listed[name] = true
	}
	for _, f := range files {
		if f != "sha256sums" && !listed[f] {
			t.Errorf("sha256sums does not list %s", f)
		}
	}
	cmd := exec.Command("sha256sum", "-c", "--strict", "sha256sums")
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
}

// readTarGz returns the entries of a .tar.gz (or .tgz) and their contents.
func readTarGz(t *testing.T, path string) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var hs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		hs = append(hs, h)
		if h.Typeflag == tar.TypeReg {
			data[h.Name], _ = io.ReadAll(tr)
		}
	}
	return hs, data
}

// checkBinaryTarball checks one architecture's tarball and returns its two
// binaries: static ELF executables of that machine that print the version
// (run when the machine can).
func checkBinaryTarball(t *testing.T, path, version, arch string) map[string][]byte {
	t.Helper()
	hs, data := readTarGz(t, path)
	dir := fmt.Sprintf("hostlease-%s-linux-%s/", version, arch)
	var names []string
	for _, h := range hs {
		names = append(names, h.Name)
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s: mtime %v owner %d:%d, want the epoch and 0:0", filepath.Base(path), h.Name, h.ModTime, h.Uid, h.Gid)
		}
	}
	wantNames := []string{dir, dir + "LICENSE", dir + "README.md", dir + "hostlease", dir + "hostlease-gc"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("%s holds %q, want %q", filepath.Base(path), names, wantNames)
	}
	if lic, _ := os.ReadFile("../LICENSE"); !bytes.Equal(data[dir+"LICENSE"], lic) || !bytes.Contains(lic, []byte("Apache License")) {
		t.Errorf("%s: LICENSE is not the repository's Apache License", filepath.Base(path))
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	bins := map[string][]byte{}
	tmp := t.TempDir()
	for _, h := range hs {
		name := filepath.Base(h.Name)
		if name != "hostlease" && name != "hostlease-gc" {
			continue
		}
		bins[name] = data[h.Name]
		if h.Mode&0o777 != 0o755 {
			t.Errorf("%s: mode %o, want 0755", h.Name, h.Mode)
		}
		ef, err := elf.NewFile(bytes.NewReader(data[h.Name]))
		if err != nil {
			t.Errorf("%s: not ELF: %v", h.Name, err)
			continue
		}
		if ef.Machine != machine || ef.Type != elf.ET_EXEC {
			t.Errorf("%s: %v %v, want a %v executable", h.Name, ef.Machine, ef.Type, machine)
		}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s: dynamically linked (%v), want static (CGO_ENABLED=0)", h.Name, p.Type)
			}
		}
		if arch != runtime.GOARCH {
			continue
		}
		exe := filepath.Join(tmp, name)
		if err := os.WriteFile(exe, data[h.Name], 0o755); err != nil {
			t.Fatal(err)
		}
		// The plugin prints its version when run outside a runtime (no
		// CNI_COMMAND); the daemon has a version verb.
		args := []string{"--version"}
		if name == "hostlease-gc" {
			args = []string{"version"}
		}
		cmd := exec.Command(exe, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), name+" "+version+" ") {
			t.Errorf("%s %s: %v: %q, want %q in it", name, strings.Join(args, " "), err, out, name+" "+version)
		}
	}
	return bins
}

// ociDescriptor is an OCI content descriptor.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// checkOCIArchive reads the OCI image layout in the archive: every blob
// matches its digest and size, index.json names the release's image, the
// image index has one image per architecture, each with the Dockerfile's
// entrypoint and that architecture's released binaries.
func checkOCIArchive(t *testing.T, path, version string, bins map[string]map[string][]byte) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		if h.Typeflag == tar.TypeReg {
			files[h.Name], _ = io.ReadAll(tr)
		}
	}
	if string(files["oci-layout"]) == "" || !strings.Contains(string(files["oci-layout"]), `"imageLayoutVersion": "1.0.0"`) {
		t.Errorf("oci-layout: %q", files["oci-layout"])
	}
	// blob returns the blob of d, checked against its digest and size.
	blob := func(d ociDescriptor, wantType string) []byte {
		t.Helper()
		if d.MediaType != wantType {
			t.Errorf("%s: media type %s, want %s", d.Digest, d.MediaType, wantType)
		}
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s is not in the archive", d.Digest)
		}
		if s := sha256.Sum256(b); "sha256:"+hex.EncodeToString(s[:]) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: sha256 %x, %d bytes; the descriptor says %d", d.Digest, s, len(b), d.Size)
		}
		return b
	}
	var top struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("index.json: %v: %s", err, files["index.json"])
	}
	ref := releaseImage + ":" + version
	if a := top.Manifests[0].Annotations; a["io.containerd.image.name"] != ref || a["org.opencontainers.image.ref.name"] != version {
		t.Errorf("index.json annotations %v, want the name %s and the tag %s", a, ref, version)
	}
	var index struct{ Manifests []ociDescriptor }
	if err := json.Unmarshal(blob(top.Manifests[0], "application/vnd.oci.image.index.v1+json"), &index); err != nil {
		t.Fatal(err)
	}
	var arches []string
	for _, m := range index.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" {
			t.Fatalf("image index entry %s: platform %+v", m.Digest, m.Platform)
		}
		arch := m.Platform.Architecture
		arches = append(arches, arch)
		var manifest struct {
			Config ociDescriptor
			Layers []ociDescriptor
		}
		if err := json.Unmarshal(blob(m, "application/vnd.oci.image.manifest.v1+json"), &manifest); err != nil {
			t.Fatal(err)
		}
		var config struct {
			Architecture, OS string
			Config           struct {
				Entrypoint, Cmd []string
				User            string
			}
		}
		if err := json.Unmarshal(blob(manifest.Config, "application/vnd.oci.image.config.v1+json"), &config); err != nil {
			t.Fatal(err)
		}
		c := config.Config
		if config.Architecture != arch || config.OS != "linux" || !slices.Equal(c.Entrypoint, []string{"/hostlease-gc"}) ||
			!slices.Equal(c.Cmd, []string{"run"}) || c.User != "65532" {
			t.Errorf("%s: config %+v, want linux/%s, entrypoint [/hostlease-gc], cmd [run], user 65532 (as the Dockerfile)", arch, config, arch)
		}
		found := map[string][]byte{}
		for _, l := range manifest.Layers {
			zr, err := gzip.NewReader(bytes.NewReader(blob(l, "application/vnd.oci.image.layer.v1.tar+gzip")))
			if err != nil {
				t.Fatal(err)
			}
			lr := tar.NewReader(zr)
			for {
				h, err := lr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				p := "/" + strings.TrimSuffix(h.Name, "/")
				if h.Typeflag == tar.TypeReg && (p == "/hostlease" || p == "/hostlease-gc") {
					found[p], _ = io.ReadAll(lr)
				}
			}
		}
		for _, name := range []string{"hostlease", "hostlease-gc"} {
			if !bytes.Equal(found["/"+name], bins[arch][name]) {
				t.Errorf("%s: /%s (%d bytes) is not the released %s binary (%d bytes)", arch, name, len(found["/"+name]), arch, len(bins[arch][name]))
			}
		}
	}
	if slices.Sort(arches); !slices.Equal(arches, releaseArches) {
		t.Errorf("the image index has %v, want %v", arches, releaseArches)
	}
}

// checkChartPackage checks the chart's metadata and renders the package
// with the real helm: deploy/base's objects, the image tag being the
// release's version (the chart's appVersion).
func checkChartPackage(t *testing.T, path, chartVersion, version string) {
	hs, data := readTarGz(t, path)
	for _, h := range hs {
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want the epoch (reproducible)", h.Name, h.ModTime)
		}
	}
	var meta struct{ Name, Version, AppVersion string }
	if err := yaml.Unmarshal(data["hostlease/Chart.yaml"], &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "hostlease" || meta.Version != chartVersion || meta.AppVersion != version {
		t.Errorf("Chart.yaml: %+v, want hostlease %s appVersion %s", meta, chartVersion, version)
	}
	out, err := runHelm(t, "template", release, path, "--namespace", namespace)
	if err != nil {
		t.Fatal(err)
	}
	compareWithKustomize(t, "base", decodeDocs(t, "helm template "+filepath.Base(path), withDevTag(t, out, version)))
}
