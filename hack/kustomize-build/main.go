// Command kustomize-build renders a kustomization with the kustomize API the
// project's tests use (sigs.k8s.io/kustomize/api, krusty, default options),
// so a release's rendered manifest is the tests' `build` of the same tree.
//
//	go run ./hack/kustomize-build [-image NAME=NEWNAME:NEWTAG] DIR >out.yaml
//
// -image applies kustomize's images transformer (as an overlay's `images:`
// would) to the rendered objects; nothing else is changed. The output is the
// objects in kustomize's order, as YAML documents separated by "---".
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	image := flag.String("image", "", "NAME=NEWNAME:NEWTAG: set the image NAME to NEWNAME:NEWTAG (kustomize's images transformer)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kustomize-build [-image NAME=NEWNAME:NEWTAG] DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	out, err := render(flag.Arg(0), *image)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize-build:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

// render builds dir; with image, through an in-memory overlay of dir that
// sets the image (dir itself is read from disk, unchanged).
func render(dir, image string) ([]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fs := filesys.MakeFsOnDisk()
	target := abs
	if image != "" {
		name, ref, ok := strings.Cut(image, "=")
		newName, newTag, ok2 := strings.Cut(ref, ":")
		if !ok || !ok2 || name == "" || newName == "" || newTag == "" || strings.ContainsAny(image, " \n\"'") {
			return nil, fmt.Errorf("-image %q: want NAME=NEWNAME:NEWTAG", image)
		}
		overlay, err := os.MkdirTemp("", "kustomize-build-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(overlay)
		// kustomize takes a base by relative path only.
		rel, err := filepath.Rel(overlay, abs)
		if err != nil {
			return nil, err
		}
		k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %q\nimages:\n- name: %q\n  newName: %q\n  newTag: %q\n",
			filepath.ToSlash(rel), name, newName, newTag)
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			return nil, err
		}
		target = overlay
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, target)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return resMap.AsYaml()
}
