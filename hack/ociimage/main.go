// Command ociimage packs one static binary into a single-layer OCI image
// archive (an OCI image layout, tarred) that `ctr images import` accepts.
//
// Usage:
//
//	ociimage -binary ./pause -name localhost/hostlease/pause:e2e -o pause.tar
//	ociimage -binary bin/hostlease-gc -entry hostlease-gc -add hostlease=bin/hostlease \
//	    -add busybox/sh=/bin/busybox -symlink busybox/cp=sh -env PATH=/busybox ...
//
// Guarantees:
//   - the archive is an OCI image layout: `oci-layout`, `index.json` and
//     content-addressed `blobs/sha256/<hex>` (config, manifest, one gzip layer);
//     every descriptor's digest is the sha256 of the blob and its size the
//     blob's length;
//   - the index entry carries both `org.opencontainers.image.ref.name` (the
//     tag part, as the OCI spec defines it) and `io.containerd.image.name`
//     (the full name), so containerd names the imported image -name;
//   - the layer holds the binary at /<entry> (mode 0755) and the image's
//     entrypoint is that path;
//   - output is byte-for-byte reproducible for the same inputs (fixed
//     timestamps, owners and ordering); the archive is written to a temp
//     file and renamed into place, so a reader never sees a partial file.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// epoch is the fixed timestamp of every file and of the image config.
var epoch = time.Unix(0, 0).UTC()

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

// pairs is a repeatable dst=src flag.
type pairs [][2]string

func (p *pairs) String() string { return fmt.Sprint(*p) }
func (p *pairs) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || dst == "" || src == "" || strings.HasPrefix(dst, "/") || strings.Contains(dst, "..") {
		return fmt.Errorf("want relative-dst=src, got %q", v)
	}
	*p = append(*p, [2]string{dst, src})
	return nil
}

// strs is a repeatable string flag.
type strs []string

func (s *strs) String() string     { return strings.Join(*s, ",") }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

var (
	adds, links pairs
	envs        strs
)

func main() {
	flag.Var(&adds, "add", "dst=src: also put file src at /dst (mode 0755); repeatable")
	flag.Var(&links, "symlink", "dst=target: a symlink /dst -> target; repeatable")
	flag.Var(&envs, "env", "K=V in the image config's Env; repeatable")
	bin := flag.String("binary", "", "static binary to put into the image (required)")
	entry := flag.String("entry", "pause", "file name of the binary inside the image, at the root")
	name := flag.String("name", "localhost/hostlease/pause:e2e", "full image name")
	arch := flag.String("arch", runtime.GOARCH, "image architecture")
	out := flag.String("o", "pause.tar", "output archive")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "ociimage: -binary is required")
		os.Exit(2)
	}
	if err := build(*bin, *entry, *name, *arch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func build(bin, entry, name, arch, out string) error {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if strings.Contains(entry, "/") || entry == "" {
		return fmt.Errorf("-entry %q must be a plain file name", entry)
	}

	// The layer: one tar holding /<entry>, the -add files and -symlinks.
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	dirs := map[string]bool{}
	mkParents := func(p string) error {
		var parts []string
		for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
			parts = append([]string{d}, parts...)
		}
		for _, d := range parts {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return nil
	}
	addFile := func(p string, data []byte) error {
		if err := mkParents(p); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: int64(len(data)),
			ModTime: epoch, Format: tar.FormatPAX,
		}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := addFile(entry, exe); err != nil {
		return err
	}
	for _, a := range adds {
		data, err := os.ReadFile(a[1])
		if err != nil {
			return err
		}
		if err := addFile(a[0], data); err != nil {
			return err
		}
	}
	for _, l := range links {
		if err := mkParents(l[0]); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l[0], Linkname: l[1], Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	diffID := newBlob(layerTar.Bytes()).digest

	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.ModTime = epoch
	if _, err := zw.Write(layerTar.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	layer := newBlob(gz.Bytes())

	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": arch,
		"os":           "linux",
		"config":       imageConfig(entry),
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]any{{
			"created":    epoch.Format(time.RFC3339),
			"created_by": "hostlease hack/ociimage",
		}},
	})
	if err != nil {
		return err
	}
	cfg := newBlob(config)

	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor{
			MediaType: "application/vnd.oci.image.config.v1+json",
			Digest:    cfg.digest, Size: int64(len(cfg.data)),
		},
		"layers": []descriptor{{
			MediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
			Digest:    layer.digest, Size: int64(len(layer.data)),
		}},
	})
	if err != nil {
		return err
	}
	man := newBlob(manifest)

	tag := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag = name[i+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json",
			Digest:    man.digest, Size: int64(len(man.data)),
			Annotations: map[string]string{
				"org.opencontainers.image.ref.name": tag,
				"io.containerd.image.name":          name,
			},
			Platform: &platform{Architecture: arch, OS: "linux"},
		}},
	})
	if err != nil {
		return err
	}

	tmp, err := os.CreateTemp(filepath.Dir(out), ".ociimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	aw := tar.NewWriter(tmp)
	dir := func(p string) error {
		return aw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(p string, data []byte) error {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := aw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)) },
		func() error { return file("index.json", index) },
		func() error { return dir("blobs/") },
		func() error { return dir("blobs/sha256/") },
	}
	for _, b := range []blob{layer, cfg, man} {
		b := b
		steps = append(steps, func() error {
			return file("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.data)
		})
	}
	for _, s := range steps {
		if err := s(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := aw.Close(); err != nil {
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
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	fmt.Printf("ociimage: wrote %s (%s, manifest %s)\n", out, name, man.digest)
	return nil
}

// imageConfig is the image config's "config" object: the entrypoint and,
// when given, -env.
func imageConfig(entry string) map[string]any {
	c := map[string]any{"Entrypoint": []string{"/" + entry}}
	if len(envs) > 0 {
		c["Env"] = []string(envs)
	}
	return c
}
