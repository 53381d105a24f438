package k8s

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/e2e/harness"
)

func buildDaemonSet(t testing.TB, dir string) map[string]any {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	for _, r := range rm.Resources() {
		if r.GetKind() != "DaemonSet" {
			continue
		}
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(y, &ds); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(ds)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	t.Fatalf("%s has no DaemonSet", dir)
	return nil
}

// diffPaths lists the JSON paths where a and b differ (leaves, list indexes).
func diffPaths(prefix string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			diffPaths(prefix+"/"+k, am[k], bm[k], out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok {
		for i := 0; i < max(len(al), len(bl)); i++ {
			var x, y any
			if i < len(al) {
				x = al[i]
			}
			if i < len(bl) {
				y = bl[i]
			}
			diffPaths(fmt.Sprintf("%s/%d", prefix, i), x, y, out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, prefix)
	}
}

// The test overlay changes only what this environment forces (image and
// pull policy, hostPaths, API address, metrics address, netns path), its
// netns mount and --netns-dir agree, and its paths are the harness's.
func TestOverlayChangesOnlyEnvironment(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	base := buildDaemonSet(t, filepath.Join(root, "deploy", "base"))
	over := buildDaemonSet(t, filepath.Join(root, "e2e", "k8s", "overlay"))
	var got []string
	diffPaths("", base, over, &got)
	sort.Strings(got)
	const p = "/spec/template/spec"
	want := []string{
		p + "/containers/0/args/4", // --netns-dir
		p + "/containers/0/args/5", // --metrics-addr
		p + "/containers/0/env/3",  // KUBERNETES_SERVICE_HOST
		p + "/containers/0/env/4",  // KUBERNETES_SERVICE_PORT
		p + "/containers/0/image",
		p + "/containers/0/imagePullPolicy",
		p + "/containers/0/ports/0/containerPort",
		p + "/containers/0/volumeMounts/2/mountPath", // netns
		p + "/initContainers/0/image",
		p + "/initContainers/0/imagePullPolicy",
		p + "/volumes/0/hostPath/path",
		p + "/volumes/1/hostPath/path",
		p + "/volumes/2/hostPath/path",
		p + "/volumes/3/hostPath/path",
	}
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("overlay changes\n  %s\nwant exactly\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	spec := over["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	gcC := spec["containers"].([]any)[0].(map[string]any)
	vols := map[string]string{}
	for _, v := range spec["volumes"].([]any) {
		v := v.(map[string]any)
		if hp, ok := v["hostPath"].(map[string]any); ok {
			vols[v["name"].(string)] = hp["path"].(string)
		}
	}
	mounts := map[string]string{}
	for _, m := range gcC["volumeMounts"].([]any) {
		m := m.(map[string]any)
		mounts[m["name"].(string)] = m["mountPath"].(string)
	}
	args := strings.Join(anyStrings(gcC["args"]), " ")
	if vols["netns"] != NetnsDir || mounts["netns"] != NetnsDir || !strings.Contains(args, "--netns-dir="+NetnsDir) {
		t.Errorf("netns: hostPath %s, mountPath %s, args %s; want all %s", vols["netns"], mounts["netns"], args, NetnsDir)
	}
	if vols["cni-bin"] != CNIBinDir || vols["data-dir"] != CNIDataDir || vols["cri-socket-dir"] != RunDir {
		t.Errorf("hostPaths %v differ from the harness's", vols)
	}
	if !strings.Contains(args, fmt.Sprintf("--metrics-addr=%s:%d", NodeIP, MetricsPort)) {
		t.Errorf("args %s: metrics not on %s:%d", args, NodeIP, MetricsPort)
	}
	env := fmt.Sprint(gcC["env"])
	if !strings.Contains(env, "KUBERNETES_SERVICE_HOST value:127.0.0.1") || !strings.Contains(env, fmt.Sprintf("KUBERNETES_SERVICE_PORT value:%d", APIPort)) {
		t.Errorf("env %s: API not at 127.0.0.1:%d", env, APIPort)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
