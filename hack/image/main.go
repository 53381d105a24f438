//go:build hostlease_imagetool

// Command image builds a container image from local files with
// go-containerregistry and writes it as a docker-archive tarball that
// `ctr images import` (and `docker load`, `skopeo copy docker-archive:`,
// `crane push`) accept, or with -format oci as an OCI archive (a tar of an
// OCI image layout: `skopeo copy oci-archive:`, `ctr images import`, `crane
// push` of the extracted directory) holding one image per -arch under one
// image index. It is built and run by hack/image.sh in a throwaway wrapper
// module: the project's go.mod never requires go-containerregistry.
//
//	image -name localhost/hostlease/pause:e2e -o pause.tar -entrypoint /pause /pause=./pause
//	image -name localhost/hostlease/hostlease:e2e -o hl.tar -base \
//	    -entrypoint /hostlease-gc -cmd run /hostlease=bin/hostlease /hostlease-gc=bin/hostlease-gc
//	image -format oci -arch amd64,arm64 -name ghcr.io/hostlease/hostlease:v1 -o hl.oci.tar -base \
//	    -entrypoint /hostlease-gc -cmd run /hostlease=out/linux-{arch}/hostlease ...
//
// Guarantees:
//   - with -base, the first layer is a shell-less base equivalent to
//     distroless static (which cannot be pulled here): /etc/passwd and
//     /etc/group with root(0), nobody(65534) and nonroot(65532), /root and
//     /home/nonroot (0700, owned by their users), /tmp (1777), and the CA
//     bundle -ca-certs at /etc/ssl/certs/ca-certificates.crt when given. No
//     shell, no busybox, no libc; user 65532 as in distroless "nonroot";
//   - the files given as /dst=src arguments are one more layer, each a
//     regular file of mode 0755 owned by 0:0;
//   - the output is reproducible: the same inputs give the same bytes and the
//     same image digest (entries sorted, every timestamp the Unix epoch,
//     fixed owners and modes, no host names or build times anywhere);
//   - in an OCI archive, {arch} in a file's source is that image's
//     architecture; index.json has one entry, the image index, annotated
//     with the tag (org.opencontainers.image.ref.name) and the full name
//     (io.containerd.image.name, the name `ctr images import` gives it);
//     every media type is OCI's;
//   - the archive is written to a temp file in the output's directory and
//     renamed into place: a reader never sees a partial archive.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the time of every file, layer and of the image itself.
var epoch = time.Unix(0, 0).UTC()

// strs is a repeatable string flag.
type strs []string

func (s *strs) String() string     { return strings.Join(*s, ",") }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

// entry is one tar entry of a layer.
type entry struct {
	name     string // absolute path in the image
	typ      byte   // tar.TypeReg or tar.TypeDir
	mode     int64
	uid, gid int
	data     []byte
}

func main() {
	var cmd, envs strs
	ref := flag.String("name", "", "full image name, e.g. localhost/hostlease/pause:e2e (required)")
	out := flag.String("o", "", "output docker-archive tarball (required)")
	base := flag.Bool("base", false, "put the shell-less distroless-static equivalent base layer under the files")
	caCerts := flag.String("ca-certs", "", "with -base: CA bundle to install as /etc/ssl/certs/ca-certificates.crt")
	entrypoint := flag.String("entrypoint", "", "the image's entrypoint (one absolute path; required)")
	flag.Var(&cmd, "cmd", "an argument of the image's Cmd; repeatable")
	flag.Var(&envs, "env", "K=V in the image's Env; repeatable")
	user := flag.String("user", "", "the image's User (default: 65532 with -base, else none)")
	arch := flag.String("arch", runtime.GOARCH, "image architecture; with -format oci a comma-separated list")
	format := flag.String("format", "docker", "docker (a docker-archive) or oci (an OCI archive)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: image -name NAME -o OUT.tar -entrypoint /PATH [flags] /DST=SRC...")
		flag.PrintDefaults()
	}
	flag.Parse()
	arches := strings.Split(*arch, ",")
	if *ref == "" || *out == "" || !strings.HasPrefix(*entrypoint, "/") || flag.NArg() == 0 ||
		(*format != "docker" && *format != "oci") || (*format == "docker" && len(arches) != 1) {
		flag.Usage()
		os.Exit(2)
	}
	spec := imageSpec{base: *base, caCerts: *caCerts, entrypoint: *entrypoint, cmd: cmd, envs: envs, user: *user, files: flag.Args()}
	var digest v1.Hash
	var err error
	if *format == "oci" {
		digest, err = buildOCI(*ref, *out, spec, arches)
	} else {
		digest, err = build(*ref, *out, spec, arches[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: wrote %s (%s, digest %s)\n", *out, *ref, digest)
}

// imageSpec is what every image of one build shares.
type imageSpec struct {
	base                bool
	caCerts, entrypoint string
	cmd, envs           []string
	user                string
	files               []string // /DST=SRC, {arch} in SRC replaced by the image's architecture
}

// build writes the image for arch as a docker-archive.
func build(ref, out string, spec imageSpec, arch string) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := image(spec, arch, false)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, writeAtomically(out, func(f *os.File) error { return tarball.Write(tag, img, f) })
}

// buildOCI writes one image per arch, under one image index, as an OCI
// archive; the digest is the index's.
func buildOCI(ref, out string, spec imageSpec, arches []string) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range arches {
		img, err := image(spec, arch, true)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), ".image-layout-*")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	})); err != nil {
		return v1.Hash{}, err
	}
	return digest, writeAtomically(out, func(f *os.File) error { return tarDir(dir, f) })
}

// image is the image for arch; oci selects OCI media types (else Docker's).
func image(spec imageSpec, arch string, oci bool) (v1.Image, error) {
	var layers [][]entry
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	user := spec.user
	if spec.base {
		b, err := baseLayer(spec.caCerts)
		if err != nil {
			return nil, err
		}
		layers = append(layers, b)
		if spec.caCerts != "" {
			env = append(env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
		}
		if user == "" {
			user = "65532"
		}
	}
	var app []entry
	for _, f := range spec.files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok || !path.IsAbs(dst) || path.Clean(dst) != dst || dst == "/" || src == "" {
			return nil, fmt.Errorf("file argument %q: want /DST=SRC with a clean absolute DST", f)
		}
		data, err := os.ReadFile(strings.ReplaceAll(src, "{arch}", arch))
		if err != nil {
			return nil, err
		}
		app = append(app, entry{name: dst, typ: tar.TypeReg, mode: 0o755, data: data})
	}
	layers = append(layers, app)

	img := empty.Image
	var layerOpts []tarball.LayerOption
	if oci {
		img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerOpts = append(layerOpts, tarball.WithMediaType(types.OCILayer))
	}
	for i, l := range layers {
		b, err := layerTar(l)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, layerOpts...)
		if err != nil {
			return nil, err
		}
		what := "files"
		if spec.base && i == 0 {
			what = "base: passwd, group, /tmp, CA certificates (distroless static equivalent)"
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "hostlease hack/image: " + what,
		}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{spec.entrypoint},
		Cmd:        spec.cmd,
		Env:        append(env, spec.envs...),
		User:       user,
		WorkingDir: "/",
	}
	return mutate.ConfigFile(img, cf)
}

// writeAtomically writes out through write into a temp file in its
// directory, fsyncs it, makes it 0644 and renames it into place.
func writeAtomically(out string, write func(*os.File) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// tarDir writes the tree under dir (an OCI image layout: directories and
// regular files only) as a tar, sorted by path, with fixed times, owners
// and modes.
func tarDir(dir string, w io.Writer) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: n, Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: st.Size()}
		if st.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = n+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if st.IsDir() {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// baseLayer is the distroless-static equivalent: users and groups, their
// homes, /tmp, and the CA bundle when given.
func baseLayer(caCerts string) ([]entry, error) {
	es := []entry{
		{name: "/etc/passwd", typ: tar.TypeReg, mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "/etc/group", typ: tar.TypeReg, mode: 0o644, data: []byte(
			"root:x:0:\n" +
				"nobody:x:65534:\n" +
				"nonroot:x:65532:\n")},
		{name: "/root", typ: tar.TypeDir, mode: 0o700},
		{name: "/home/nonroot", typ: tar.TypeDir, mode: 0o700, uid: 65532, gid: 65532},
		{name: "/tmp", typ: tar.TypeDir, mode: 0o1777},
	}
	if caCerts != "" {
		data, err := os.ReadFile(caCerts)
		if err != nil {
			return nil, err
		}
		es = append(es, entry{name: "/etc/ssl/certs/ca-certificates.crt", typ: tar.TypeReg, mode: 0o644, data: data})
	}
	return es, nil
}

// layerTar is the layer's tar: every entry and its missing parent
// directories (0755, root), sorted by path, with fixed times and owners.
func layerTar(es []entry) ([]byte, error) {
	all := map[string]entry{}
	for _, e := range es {
		if _, dup := all[e.name]; dup {
			return nil, fmt.Errorf("%s given twice", e.name)
		}
		all[e.name] = e
	}
	for _, e := range es {
		for d := path.Dir(e.name); d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = entry{name: d, typ: tar.TypeDir, mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := all[n]
		h := &tar.Header{
			Typeflag: e.typ, Name: strings.TrimPrefix(n, "/"), Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: epoch, Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeDir {
			h.Name += "/"
		} else {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
