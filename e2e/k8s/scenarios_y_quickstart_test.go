package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// Runs after TestHelm (file order) and before the suite's audit check: it
// replaces whatever install is there with README's Quick start, uninstalls
// it with README's Uninstall, and leaves the node as TestHelm does (no
// install, the node's conflist naming the plugin, the plugin in CNIBinDir).

// ReleaseDirEnv names the directory holding one `make release` output
// (hack/e2e-k8s.sh writes it before the suite starts; default
// <repo>/bin/e2e-k8s-release).
const ReleaseDirEnv = "HOSTLEASE_K8S_RELEASE"

// release is one `make release` output: its directory, version (V) and
// chart version (C), read from the artefacts' names.
type release struct{ dir, version, chartVersion string }

var (
	imageArchive = regexp.MustCompile(`^hostlease-(.+)-image\.oci\.tar$`)
	chartPackage = regexp.MustCompile(`^hostlease-(\d+\.\d+\.\d+.*)\.tgz$`)
)

func findRelease(t testing.TB) release {
	t.Helper()
	dir := os.Getenv(ReleaseDirEnv)
	if dir == "" {
		root, err := harness.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin", "e2e-k8s-release")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("no release (run: make release DIST=%s; hack/e2e-k8s.sh does): %v", dir, err)
	}
	r := release{dir: dir}
	for _, e := range ents {
		if m := imageArchive.FindStringSubmatch(e.Name()); m != nil {
			if r.version != "" {
				t.Fatalf("%s holds more than one release (%s, %s): use a directory of its own", dir, r.version, m[1])
			}
			r.version = m[1]
		}
		if m := chartPackage.FindStringSubmatch(e.Name()); m != nil {
			if r.chartVersion != "" {
				t.Fatalf("%s holds more than one chart (%s, %s)", dir, r.chartVersion, m[1])
			}
			r.chartVersion = m[1]
		}
	}
	if r.version == "" || r.chartVersion == "" {
		t.Fatalf("%s: no image archive or chart package (run: make release DIST=%s)", dir, dir)
	}
	return r
}

// registryTools is the directory of crane and skopeo (hack/registry-setup.sh,
// run by hack/setup.sh and hack/e2e-k8s.sh; never built here).
func registryTools(t testing.TB) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, "hack", "registry-setup.sh"), "--path").Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("hack/registry-setup.sh --path: %s", msg)
	}
	return strings.TrimSpace(string(out))
}

// startRegistry serves a registry on loopback (crane registry serve, blobs
// on disk under Root) until the end of the test and returns its host:port.
// containerd 2.x pulls from a loopback registry whose port is not 443 over
// plain HTTP (its default host config for localhost), so the node needs no
// registry configuration.
func startRegistry(t testing.TB, crane string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	blobs := filepath.Join(Root, "registry")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(LogDir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(crane, "registry", "serve", "--address", addr, "--disk", blobs)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		os.RemoveAll(blobs)
	})
	waitUntil(t, 30*time.Second, "the registry on "+addr, func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("crane registry serve exited (log %s)", logf.Name())
		default:
		}
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return addr
}

// nodeValues writes the node's paths and ports (e2e/k8s/helm-values.yaml
// without its image: the README's command names the image) to a values
// file: what an operator whose nodes are not laid out as the chart's
// defaults passes (README step 4's comments: netnsDir, criEndpoint).
func nodeValues(t testing.TB, dst string) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "e2e", "k8s", "helm-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "image")
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// procedureRunner runs README commands with bash in the release's
// directory, as an operator's shell would: kubectl, helm, crane and skopeo
// on PATH, KUBECONFIG the cluster's admin kubeconfig.
type procedureRunner struct {
	dir string
	env []string
}

func (p procedureRunner) run(t testing.TB, what string, cmds []string) string {
	t.Helper()
	script := strings.Join(cmds, "\n")
	t.Logf("%s:\n%s", what, script)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = p.dir, p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", what, err, out)
	}
	t.Logf("%s: output:\n%s", what, out)
	return string(out)
}

// Scenario (README's Quick start with Helm, Upgrade and Uninstall, as
// written): the commands of README.md's "Quick start → Helm" steps 1-5,
// "Upgrade" steps 2-3 and "Uninstall" steps 2-4, read from the README at
// test time, run with bash
// against one `make release` output and a registry on loopback, V, C and
// REG substituted, and the node's own directories for /opt/cni/bin and
// /var/lib/cni/hostlease. Two additions, both named in the README: skopeo
// gets --dest-tls-verify=false (the registry has no TLS; step 2 documents
// it), helm install gets the node's paths as a values file (step 4's
// comments). Checked: the checksums; the image pushed by skopeo and by the
// crane alternative; the DaemonSet rolled out with its image pulled from the
// registry; the release's plugin installed on the node; a pod's address
// committed by hostlease; the upgrade to a new tag keeping the install's
// values; after Roll back (to host-local) and Uninstall: no
// object of the release, no namespace, no plugin, no store, host-local's
// reservations kept and honoured by a new pod.
func TestQuickStartHelm(t *testing.T) {
	c := cluster(t)
	requireDefaultNode(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quick, err := ReadmeProcedure(string(readme), "## Quick start", "### Helm")
	if err != nil {
		t.Fatal(err)
	}
	uninstall, err := ReadmeProcedure(string(readme), "## Uninstall")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadmeProcedure(string(readme), "## Upgrade"); err != nil {
		t.Fatal(err)
	}
	if len(quick) < 5 || len(uninstall) < 4 {
		t.Fatalf("README: Quick start → Helm has %d steps, Uninstall %d; this test runs steps 1-5 and 1-4", len(quick), len(uninstall))
	}
	rel := findRelease(t)
	tools := registryTools(t)
	helm := helmBin(t)

	// The operator's PATH: kubectl, helm, crane, skopeo.
	pathDir := filepath.Join(Root, "quickstart-bin")
	if err := os.MkdirAll(pathDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"kubectl": c.Bins.Kubectl, "helm": helm,
		"crane": filepath.Join(tools, "crane"), "skopeo": filepath.Join(tools, "skopeo"),
	} {
		os.Remove(filepath.Join(pathDir, name))
		if err := os.Symlink(target, filepath.Join(pathDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	reg := startRegistry(t, filepath.Join(tools, "crane"))
	work := filepath.Join(Root, "quickstart")
	os.RemoveAll(work)
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", rel.dir+"/.", work).CombinedOutput(); err != nil {
		t.Fatalf("copy the release: %v: %s", err, out)
	}
	values := filepath.Join(Root, "quickstart-node-values.yaml")
	nodeValues(t, values)
	home := filepath.Join(Root, "helm-home")
	sh := procedureRunner{dir: work, env: append(os.Environ(),
		"PATH="+pathDir+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig,
		"HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)}
	sub := func(cmd string) string {
		cmd = Substitute(cmd, rel.version, rel.chartVersion, reg)
		return strings.NewReplacer("/opt/cni/bin", CNIBinDir, "/var/lib/cni/hostlease", CNIDataDir).Replace(cmd)
	}
	t.Logf("release %s (chart %s) from %s, registry %s", rel.version, rel.chartVersion, rel.dir, reg)

	// Start from a node without hostlease's objects (the suite's kustomize
	// install, if any; TestHelm uninstalls its own), and without the
	// namespace: step 3 creates it.
	removeKustomizeInstall(t, c)
	kubectl(t, c, "delete", "namespace", SysNamespace, "--ignore-not-found", "--wait", "--timeout=100s")
	t.Cleanup(func() { restoreNodeAfterQuickStart(t, c, helm) })

	// Steps 1-5, as written.
	for _, s := range quick[:5] {
		var cmds []string
		for _, cmd := range s.Cmds {
			cmd = sub(cmd)
			switch {
			case strings.HasPrefix(cmd, "skopeo copy "):
				const insecure = "--dest-tls-verify=false"
				if !strings.Contains(s.Text, insecure) {
					t.Fatalf("README step 2 does not say what a registry without TLS needs (%s); this test's registry has none", insecure)
				}
				cmd = "skopeo copy " + insecure + " " + strings.TrimPrefix(cmd, "skopeo copy ")
			case strings.HasPrefix(cmd, "helm install "):
				cmd += " -f " + values
			}
			cmds = append(cmds, cmd)
		}
		if len(cmds) == 0 {
			t.Fatalf("README Quick start → Helm step %d has no command:\n%s", s.N, s.Text)
		}
		sh.run(t, fmt.Sprintf("Quick start → Helm step %d", s.N), cmds)
		if s.N == 2 {
			checkPushed(t, sh, s, sub, reg, rel)
		}
	}

	// What an operator checks: the DaemonSet's pod runs the image from the
	// registry, the release's plugin is on the node, a pod gets an address.
	waitDaemonSetReady(t, c)
	want := reg + "/hostlease:" + rel.version
	st := kubectl(t, c, "-n", SysNamespace, "get", "pods", "-l", "app.kubernetes.io/name=hostlease-gc", "-o",
		`jsonpath={range .items[*].status.initContainerStatuses[*]}{.image} {.imageID}{"\n"}{end}{range .items[*].status.containerStatuses[*]}{.image} {.imageID}{"\n"}{end}`)
	lines := strings.Split(strings.TrimSpace(st), "\n")
	if len(lines) != 2 {
		t.Fatalf("want an init container and a container in the DaemonSet's pod, got %q", st)
	}
	for _, l := range lines {
		img, id, _ := strings.Cut(l, " ")
		t.Logf("DaemonSet pod: image %s, imageID %s", img, id)
		if img != want || !strings.HasPrefix(id, reg+"/hostlease@sha256:") {
			t.Errorf("container image %q (imageID %q): want %s pulled from %s", img, id, want, reg)
		}
	}
	relPlugin := releaseBinary(t, rel, "hostlease")
	plugin := filepath.Join(CNIBinDir, "hostlease")
	if a, b := mustSHA256(t, plugin), mustSHA256(t, relPlugin); a != b {
		t.Fatalf("%s is not the release's plugin after step 5 (sha256 %s, release %s)", plugin, a, b)
	}
	waitNodeReady(t, c)
	const ns = "e2e-quickstart"
	apply(t, c, deployment(ns, "qs", 1))
	t.Cleanup(func() { deleteNamespace(t, c, ns) })
	first := waitPodsRunning(t, c, ns, 1)[0]
	t.Logf("pod %s: %s", first.Name, first.IP)
	waitUntil(t, time.Minute, "a committed record for "+first.Name, func() (bool, string) {
		for _, rec := range records(t) {
			if rec.PodUID == first.UID && rec.State == allocator.StateCommitted && rec.IP.String() == first.IP {
				return true, ""
			}
		}
		return false, "none"
	})

	quickStartUpgrade(t, c, sh, string(readme), rel, reg)

	// Uninstall step 1: the node's conflist off hostlease, by README's Roll
	// back to host-local (cordon, export, host-local, uncordon); the
	// release's hostlease-gc exports.
	if len(uninstall[0].Cmds) != 0 {
		t.Fatalf("README Uninstall step 1 now has commands %q: run them here", uninstall[0].Cmds)
	}
	kubectl(t, c, "cordon", NodeName)
	if out, err := exec.Command(releaseBinary(t, rel, "hostlease-gc"), "export", "--network", PodNetwork,
		"--data-dir", CNIDataDir, "--host-local-dir", CNIDataDir).CombinedOutput(); err != nil {
		t.Fatalf("hostlease-gc export: %v\n%s", err, out)
	}
	if err := c.WriteConflist("10-hlk8s.conflist", hostLocalConflist()); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "uncordon", NodeName)
	hostLocalFile := filepath.Join(CNIDataDir, PodNetwork, first.IP)
	if _, err := os.Stat(hostLocalFile); err != nil {
		t.Fatalf("after export: %v", err)
	}

	// Steps 2-4, as written.
	for _, s := range uninstall[1:4] {
		var cmds []string
		for _, cmd := range s.Cmds {
			cmds = append(cmds, sub(cmd))
		}
		if len(cmds) == 0 {
			t.Fatalf("README Uninstall step %d has no command:\n%s", s.N, s.Text)
		}
		sh.run(t, fmt.Sprintf("Uninstall step %d", s.N), cmds)
	}
	waitUntil(t, 3*time.Minute, "namespace "+SysNamespace+" gone", func() (bool, string) {
		gone, err := c.namespaceGone(SysNamespace)
		return gone, fmt.Sprint("still there ", err)
	})
	if left := kubernetesLeftovers(t, c); left != "" {
		t.Errorf("after Uninstall: %s", left)
	}
	if _, err := os.Stat(plugin); !os.IsNotExist(err) {
		t.Errorf("after Uninstall: %s still there (%v)", plugin, err)
	}
	if dbs, _ := filepath.Glob(filepath.Join(CNIDataDir, "*.db*")); len(dbs) != 0 {
		t.Errorf("after Uninstall: stores left %q", dbs)
	}
	if _, err := os.Stat(hostLocalFile); err != nil {
		t.Errorf("Uninstall removed host-local's reservation of the running pod: %v", err)
	}
	// The node keeps working on host-local, which honours the reservation
	// export wrote for the pod still running.
	kubectl(t, c, "-n", ns, "scale", "deployment", "qs", "--replicas=2")
	for _, p := range waitPodsRunning(t, c, ns, 2) {
		if p.UID != first.UID && p.IP == first.IP {
			t.Errorf("host-local gave %s to %s, still held by %s", p.IP, p.Name, first.Name)
		}
		if p.UID == first.UID && p.IP != first.IP {
			t.Errorf("%s changed address: %s, was %s", p.Name, p.IP, first.IP)
		}
		if p.UID != first.UID {
			if _, err := os.Stat(filepath.Join(CNIDataDir, PodNetwork, p.IP)); err != nil {
				t.Errorf("%s's address %s is not host-local's: %v", p.Name, p.IP, err)
			}
			t.Logf("after Uninstall, host-local gave %s %s", p.Name, p.IP)
		}
	}
}

// checkPushed checks step 2's push: the image is in the registry with both
// architectures, and the step's crane alternative pushes the archive's own
// index (same digest) too.
func checkPushed(t testing.TB, sh procedureRunner, s Step, sub func(string) string, reg string, rel release) {
	t.Helper()
	ref := reg + "/hostlease:" + rel.version
	out := sh.run(t, "the pushed index", []string{"crane manifest " + ref})
	var idx struct {
		Manifests []struct {
			Platform struct{ Architecture, OS string }
		}
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &idx); err != nil {
		t.Fatalf("crane manifest %s: %v", ref, err)
	}
	var plats []string
	for _, m := range idx.Manifests {
		plats = append(plats, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if strings.Join(plats, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("%s: platforms %v, want linux/amd64 and linux/arm64", ref, plats)
	}
	var alt string
	for _, a := range s.Alternatives {
		if strings.HasPrefix(a, "or: ") && strings.Contains(a, "crane push") {
			alt = strings.TrimPrefix(a, "or: ")
		}
	}
	if alt == "" {
		return
	}
	// Into a directory of its own (the alternative extracts the archive
	// into ./image) and a repository of its own.
	alt = Substitute(alt, rel.version, rel.chartVersion, reg+"/crane")
	dir := filepath.Join(sh.dir, "..", "quickstart-crane")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	archive := "hostlease-" + rel.version + "-image.oci.tar"
	if err := os.Symlink(filepath.Join(sh.dir, archive), filepath.Join(dir, archive)); err != nil {
		t.Fatal(err)
	}
	alts := sh
	alts.dir = dir
	alts.run(t, "Quick start → Helm step 2, the crane alternative", []string{alt})
	got := strings.TrimSpace(alts.run(t, "its digest", []string{"crane digest " + reg + "/crane/hostlease:" + rel.version}))
	var index struct {
		Manifests []struct{ Digest string }
	}
	b, err := exec.Command("tar", "-xOf", filepath.Join(sh.dir, archive), "index.json").Output()
	if err != nil || json.Unmarshal(b, &index) != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json of %s: %v %s", archive, err, b)
	}
	if got != index.Manifests[0].Digest {
		t.Errorf("crane push gave %s, the archive's index is %s", got, index.Manifests[0].Digest)
	}
}

// releaseBinary extracts name from the release's linux-amd64 tarball.
func releaseBinary(t testing.TB, rel release, name string) string {
	t.Helper()
	dir := filepath.Join(Root, "quickstart-release-bin")
	base := "hostlease-" + rel.version + "-linux-amd64"
	p := filepath.Join(dir, base, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-C", dir, "-xzf", filepath.Join(rel.dir, base+".tar.gz")).CombinedOutput(); err != nil {
		t.Fatalf("extract %s: %v: %s", base, err, out)
	}
	return p
}

// hostLocalConflist is the node's conflist rolled back to host-local (the
// runbook's Roll back to host-local: the ipam's "type" changed, every other
// key kept, the commit marker removed).
func hostLocalConflist() []byte {
	var conf map[string]any
	if err := json.Unmarshal(podConflist(PodSubnet, false, nil), &conf); err != nil {
		panic(err)
	}
	plugins := conf["plugins"].([]any)
	plugins[0].(map[string]any)["ipam"].(map[string]any)["type"] = "host-local"
	conf["plugins"] = plugins[:len(plugins)-1]
	b, _ := json.MarshalIndent(conf, "", "  ")
	return b
}

// restoreNodeAfterQuickStart leaves the node as TestHelm does: uncordoned,
// the node's conflist (naming hostlease), the project's plugin in
// CNIBinDir, the data dir without host-local's files, no release or
// namespace left by a failure half-way.
func restoreNodeAfterQuickStart(t testing.TB, c *Cluster, helm string) {
	t.Helper()
	runHelm(t, c, helm, "uninstall", helmRelease, "-n", SysNamespace, "--ignore-not-found", "--wait", "--timeout", "3m")
	if _, err := c.Kubectl("uncordon", NodeName); err != nil {
		t.Error(err)
	}
	restoreConflist(t, c)
	if err := harness.CopyExecutable(mustProjectBin(t, "hostlease"), filepath.Join(CNIBinDir, "hostlease")); err != nil {
		t.Error(err)
	}
	if err := os.RemoveAll(filepath.Join(CNIDataDir, PodNetwork)); err != nil {
		t.Error(err)
	}
	if err := os.MkdirAll(CNIDataDir, 0o755); err != nil {
		t.Error(err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(Root, "quickstart*"))
	for _, d := range leftovers {
		os.RemoveAll(d)
	}
	if out, err := c.Kubectl("delete", "namespace", SysNamespace, "--ignore-not-found", "--wait", "--timeout=100s"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// quickStartUpgrade runs README's Upgrade steps 2-3 as written after the
// Quick start, to a "new release": the same image under another tag (step
// 1, pushing the new release's image, is step 2 of the Quick start, shown
// above) and the release's chart packaged with that version. The upgrade
// must keep what the Quick start's install set (the registry, the node's
// paths) and move the DaemonSet to the new tag.
func quickStartUpgrade(t testing.TB, c *Cluster, sh procedureRunner, readme string, rel release, reg string) {
	t.Helper()
	steps, err := ReadmeProcedure(readme, "## Upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) < 3 {
		t.Fatalf("README Upgrade has %d steps, want 3", len(steps))
	}
	next := release{dir: sh.dir, version: "v9.9.9-e2e", chartVersion: "9.9.9-e2e"}
	sh.run(t, "Upgrade step 1 (the new release's image)", []string{
		"crane copy " + reg + "/hostlease:" + rel.version + " " + reg + "/hostlease:" + next.version,
		"mkdir -p next && tar -C next -xzf hostlease-" + rel.chartVersion + ".tgz",
		"helm package next/hostlease --version " + next.chartVersion + " --app-version " + next.version + " --destination .",
		"rm -r next",
	})
	for _, s := range steps[1:3] {
		var cmds []string
		for _, cmd := range s.Cmds {
			cmds = append(cmds, Substitute(cmd, next.version, next.chartVersion, reg))
		}
		if len(cmds) == 0 {
			t.Fatalf("README Upgrade step %d has no command:\n%s", s.N, s.Text)
		}
		sh.run(t, fmt.Sprintf("Upgrade step %d", s.N), cmds)
	}
	waitDaemonSetReady(t, c)
	got := kubectl(t, c, "-n", SysNamespace, "get", "ds", DaemonSetName, "-o",
		`jsonpath={.spec.template.spec.initContainers[0].image} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].args}`)
	t.Logf("after Upgrade: %s", got)
	want := reg + "/hostlease:" + next.version
	f := strings.Fields(got)
	if len(f) < 3 || f[0] != want || f[1] != want {
		t.Errorf("after Upgrade the DaemonSet runs %q, want %s", got, want)
	}
	if !strings.Contains(got, "--data-dir="+CNIDataDir) {
		t.Errorf("the upgrade dropped the install's values (data dir %s): %s", CNIDataDir, got)
	}
}
