//go:build hostlease_imagetool

// Command image builds a container image from local files with
// go-containerregistry and writes it as a docker-archive tarball that
// `ctr images import` (and `docker load`, `skopeo copy docker-archive:`,
// `crane push`) accept. It is built and run by hack/image.sh in a throwaway
// wrapper module: the project's go.mod never requires go-containerregistry.
//
//	image -name localhost/hostlease/pause:e2e -o pause.tar -entrypoint /pause /pause=./pause
//	image -name localhost/hostlease/hostlease:e2e -o hl.tar -base \
//	    -entrypoint /hostlease-gc -cmd run /hostlease=bin/hostlease /hostlease-gc=bin/hostlease-gc
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
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	arch := flag.String("arch", runtime.GOARCH, "image architecture")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: image -name NAME -o OUT.tar -entrypoint /PATH [flags] /DST=SRC...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *ref == "" || *out == "" || !strings.HasPrefix(*entrypoint, "/") || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	digest, err := build(*ref, *out, *base, *caCerts, *entrypoint, cmd, envs, *user, *arch, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: wrote %s (%s, digest %s)\n", *out, *ref, digest)
}

func build(ref, out string, base bool, caCerts, entrypoint string, cmd, envs []string, user, arch string, files []string) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, err
	}
	var layers [][]entry
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if base {
		b, err := baseLayer(caCerts)
		if err != nil {
			return v1.Hash{}, err
		}
		layers = append(layers, b)
		if caCerts != "" {
			env = append(env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
		}
		if user == "" {
			user = "65532"
		}
	}
	var app []entry
	for _, f := range files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok || !path.IsAbs(dst) || path.Clean(dst) != dst || dst == "/" || src == "" {
			return v1.Hash{}, fmt.Errorf("file argument %q: want /DST=SRC with a clean absolute DST", f)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return v1.Hash{}, err
		}
		app = append(app, entry{name: dst, typ: tar.TypeReg, mode: 0o755, data: data})
	}
	layers = append(layers, app)

	img := empty.Image
	for i, l := range layers {
		b, err := layerTar(l)
		if err != nil {
			return v1.Hash{}, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			return v1.Hash{}, err
		}
		what := "files"
		if base && i == 0 {
			what = "base: passwd, group, /tmp, CA certificates (distroless static equivalent)"
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "hostlease hack/image: " + what,
		}})
		if err != nil {
			return v1.Hash{}, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{entrypoint},
		Cmd:        cmd,
		Env:        append(env, envs...),
		User:       user,
		WorkingDir: "/",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}

	tmp, err := os.CreateTemp(filepath.Dir(out), ".image-*.tar")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(tag, img, tmp); err != nil {
		tmp.Close()
		return v1.Hash{}, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return v1.Hash{}, err
	}
	if err := tmp.Close(); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return v1.Hash{}, err
	}
	return digest, os.Rename(tmp.Name(), out)
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
