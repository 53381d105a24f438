package k8s

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hostlease/hostlease/e2e/harness"
)

func TestReadmeProcedureParse(t *testing.T) {
	const doc = "# x\n\n## Quick start\n\nintro `kubectl get x` not a step\n\n### Helm\n\n" +
		"1. Check: `sha256sum -c sha256sums`.\n" +
		"2. Push:\n   ```sh\n   skopeo copy a \\\n     b\n   # or: crane push image REG/x:V\n   ```\n" +
		"3. `helm uninstall x` (kustomize: `kubectl delete -k x/`), then the file `/opt/x`.\n" +
		"   More: `rm /opt/x` and the dir (`/var/x`).\n\nProse.\n\n### kustomize\n\n1. `kubectl apply -k y`\n"
	steps, err := ReadmeProcedure(doc, "## Quick start", "### Helm")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, s := range steps {
		got = append(got, s.Cmds)
	}
	want := [][]string{{"sha256sum -c sha256sums"}, {"skopeo copy a b"}, {"helm uninstall x", "rm /opt/x"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("commands %q, want %q", got, want)
	}
	if alt := steps[1].Alternatives; len(alt) != 1 || alt[0] != "or: crane push image REG/x:V" {
		t.Errorf("alternatives %q", alt)
	}
	for _, bad := range []string{
		"## Quick start\n### Helm\n1. a\n3. b\n",                     // numbering
		"## Quick start\n### Helm\n1. a\n   ```bash\n   x\n   ```\n", // not sh
		"## Quick start\n### Helm\nno steps\n",
		"## Quick start\n",
	} {
		if _, err := ReadmeProcedure(bad, "## Quick start", "### Helm"); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

func TestSubstitute(t *testing.T) {
	for in, want := range map[string]string{
		"skopeo copy --all oci-archive:hostlease-V-image.oci.tar docker://REG/hostlease:V":                  "skopeo copy --all oci-archive:hostlease-v1-image.oci.tar docker://127.0.0.1:5000/hostlease:v1",
		"mkdir image && tar -xf hostlease-V-image.oci.tar -C image && crane push image REG/hostlease:V":     "mkdir image && tar -xf hostlease-v1-image.oci.tar -C image && crane push image 127.0.0.1:5000/hostlease:v1",
		"helm install hostlease ./hostlease-C.tgz -n hostlease-system --set image.repository=REG/hostlease": "helm install hostlease ./hostlease-1.0.0+2.gabc.tgz -n hostlease-system --set image.repository=127.0.0.1:5000/hostlease",
		"kubectl -n hostlease-system rollout status ds/hostlease-gc":                                        "kubectl -n hostlease-system rollout status ds/hostlease-gc",
	} {
		if got := Substitute(in, "v1", "1.0.0+2.gabc", "127.0.0.1:5000"); got != want {
			t.Errorf("Substitute(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}

// The README's Quick start (Helm) and Uninstall parse into the commands
// TestQuickStartHelm runs on the real node.
func TestReadmeProceduresParse(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		path       []string
		first, run int // the steps TestQuickStartHelm runs, each with a command
	}{
		{[]string{"## Quick start", "### Helm"}, 1, 5},
		{[]string{"## Uninstall"}, 2, 4},
		{[]string{"## Upgrade"}, 2, 3},
	} {
		steps, err := ReadmeProcedure(string(b), p.path...)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			t.Logf("%v step %d: %q alternatives %q", p.path, s.N, s.Cmds, s.Alternatives)
			if s.N >= p.first && s.N <= p.run && len(s.Cmds) == 0 {
				t.Errorf("%v step %d has no command", p.path, s.N)
			}
		}
		if len(steps) < p.run {
			t.Errorf("%v has %d steps, TestQuickStartHelm runs up to %d", p.path, len(steps), p.run)
		}
	}
}
