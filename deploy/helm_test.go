package deploy_test

// The Helm chart deploy/helm/hostlease, rendered and linted by the real helm
// (v3, built by hack/helm-setup.sh in a throwaway module): it renders the
// same objects as the kustomize tree for the same choices, so the two
// installs cannot drift; its schema refuses a typo; its values reach the
// daemon's real flags.

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/hostlease/hostlease/pkg/daemon"
)

const (
	chartDir = "helm/hostlease"
	// release is the release name the tests render with; no object's name
	// depends on it.
	release = "hostlease"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBin returns the real helm, built by hack/helm-setup.sh when it is not
// cached yet (which needs root: without it the test fails and says how to
// build it, it never skips).
func helmBin(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("bash", "../hack/helm-setup.sh")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("hack/helm-setup.sh: %v\n%s", err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		helmPath = lines[len(lines)-1]
		if st, err := os.Stat(helmPath); err != nil || st.Mode()&0o111 == 0 {
			helmErr = fmt.Errorf("hack/helm-setup.sh printed %q, not an executable: %v", helmPath, err)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// runHelm runs helm with args and returns stdout; the error carries stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A private home: nothing of the machine's helm configuration is read
	// or written.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// helmTemplate renders the chart into namespace with extra args and decodes
// every object strictly (as build does for kustomize).
func helmTemplate(t *testing.T, args ...string) []object {
	t.Helper()
	return helmTemplateChart(t, chartDir, args...)
}

// helmTemplateChart is helmTemplate of another form of the chart (a
// packaged .tgz).
func helmTemplateChart(t *testing.T, chart string, args ...string) []object {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, chart, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeDocs(t, fmt.Sprintf("helm template %v", args), out)
}

// decodeDocs decodes every object of a multi-document YAML stream strictly
// (documents of comments only are skipped).
func decodeDocs(t *testing.T, what, stream string) []object {
	t.Helper()
	var objs []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		o, err := decode(doc)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		objs = append(objs, o)
	}
	return objs
}

// chartCases are the kustomize builds the chart must reproduce, with the
// values that choose the same: deploy/README.md's install table.
var chartCases = []struct {
	kustomize string
	values    []string
}{
	{"base", nil},
	{"overlays/crio", []string{"--set", "criEndpoint=unix:///var/run/crio/crio.sock"}},
	{"overlays/example", []string{
		"--set", "image.tag=v0.1.0",
		"--set", "monitoring.serviceMonitor.enabled=true",
		"--set", "monitoring.serviceMonitor.labels.release=kube-prometheus-stack",
		"--set", "monitoring.prometheusRule.enabled=true",
		"--set", "monitoring.prometheusRule.labels.release=kube-prometheus-stack",
		"--set", "monitoring.dashboard.enabled=true",
	}},
}

// The chart and the kustomize tree are one install: for each shipped
// kustomization, the chart with the matching values renders exactly its
// objects (decoded, every field, list order included), except the
// Namespace, which a Helm release cannot own (its record lives in it): the
// chart is installed into a namespace made from deploy/base/namespace.yaml.
func TestChartRendersKustomizeObjects(t *testing.T) {
	for _, tc := range chartCases {
		t.Run(tc.kustomize, func(t *testing.T) {
			compareWithKustomize(t, tc.kustomize, helmTemplate(t, tc.values...))
		})
	}
}

// The packaged chart (helm package, what a chart repository serves) carries
// the contents of the files its files/ links to: it renders the same
// objects, alert rules and dashboard included.
func TestChartPackage(t *testing.T) {
	dir := t.TempDir()
	if out, err := runHelm(t, "package", chartDir, "--destination", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tgz, err := filepath.Glob(filepath.Join(dir, "hostlease-*.tgz"))
	if err != nil || len(tgz) != 1 {
		t.Fatalf("helm package wrote %v (%v)", tgz, err)
	}
	tc := chartCases[len(chartCases)-1]
	if tc.kustomize != "overlays/example" {
		t.Fatalf("the last chart case is %s, want the one with every monitoring object", tc.kustomize)
	}
	compareWithKustomize(t, tc.kustomize, helmTemplateChart(t, tgz[0], tc.values...))
}

// compareWithKustomize checks that objs are exactly the objects of the
// kustomize build of dir, less its Namespace.
func compareWithKustomize(t *testing.T, dir string, objs []object) {
	t.Helper()
	var want []object
	for _, o := range build(t, dir) {
		if o.gvk.Kind != "Namespace" {
			want = append(want, o)
		}
	}
	compareObjects(t, "kustomize build "+dir, want, objs)
}

// compareObjects checks that objs are exactly the objects of wantObjs
// (the kustomize build named what), field by field.
func compareObjects(t *testing.T, what string, wantObjs, objs []object) {
	t.Helper()
	want := map[string]object{}
	for _, o := range wantObjs {
		want[objectKey(o)] = o
	}
	got := map[string]object{}
	for _, o := range objs {
		k := objectKey(o)
		if _, dup := got[k]; dup {
			t.Errorf("chart renders %s twice", k)
		}
		got[k] = o
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s has %s, the chart does not", what, k)
			continue
		}
		var diffs []string
		diffValues("", w.u.Object, g.u.Object, &diffs)
		sort.Strings(diffs)
		for _, d := range diffs {
			t.Errorf("%s: %s", k, d)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, %s does not", k, what)
		}
	}
}

func objectKey(o object) string {
	return fmt.Sprintf("%s %s/%s", o.gvk.Kind, o.namespace, o.name)
}

// diffValues lists where a (kustomize) and b (chart) differ, one line each.
func diffValues(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for k, av := range am {
			diffValues(path+"/"+k, av, bm[k], out)
		}
		for k, bv := range bm {
			if _, ok := am[k]; !ok {
				*out = append(*out, fmt.Sprintf("%s/%s: only the chart has %v", path, k, bv))
			}
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			diffValues(fmt.Sprintf("%s/%d", path, i), al[i], bl[i], out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: kustomize %#v, chart %#v", path, a, b))
	}
}

// A value the chart does not know, or one of the wrong shape, is refused
// when the chart is rendered (so at `helm install` and `helm upgrade`), with
// the key named: not at runtime by a crash-looping daemon.
func TestChartSchemaRefusesTypos(t *testing.T) {
	for _, tc := range []struct{ set, mention string }{
		{"sweep.intervall=1m", "intervall"},
		{"imagee.tag=x", "imagee"},
		{"image.tagg=x", "tagg"},
		{"monitoring.dashbaord.enabled=true", "dashbaord"},
		{"monitoring.serviceMonitor.enable=true", "enable"},
		{"resources.limits.cpus=1", "cpus"},
		{"tolerations[0].operater=Exists", "operater"},
		{"sweep.interval=30 seconds", "interval"},
		{"sweep.misses=0", "misses"},
		{"sweep.maxReclaimFraction=1.5", "maxReclaimFraction"},
		{"sweep.dryRun=maybe", "dryRun"},
		{"criEndpoint=/run/containerd/containerd.sock", "criEndpoint"},
		{"dataDir=var/lib/cni", "dataDir"},
		{"metrics.port=97340", "port"},
		{"image.pullPolicy=IfNotThere", "pullPolicy"},
		{"logFormat=yaml", "logFormat"},
		{"extraArgs[0]=dry-run", "extraArgs"},
		{"imagePullSecret[0].name=regcred", "imagePullSecret"},
		{"imagePullSecrets[0].nam=regcred", "nam"},
		{"podAnnotation.a=b", "podAnnotation"},
		{"podLabel.a=b", "podLabel"},
		{"serviceAccount.annotation.a=b", "annotation"},
		{"serviceAccount.name=other", "name"},
		{"affinity.nodeAfinity.x=y", "nodeAfinity"},
		{"image.digest=sha256:abc", "digest"},
		{"image.digest=" + strings.Repeat("a", 64), "digest"},
	} {
		_, err := runHelm(t, "template", release, chartDir, "--namespace", namespace, "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s: rendered, want the schema to refuse it", tc.set)
			continue
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("--set %s: the error does not name %q: %v", tc.set, tc.mention, err)
		}
	}
}

// Every value of the chart reaches the daemon under a flag name it really
// has (parsed with its own flag set and Validate), and the paths that must
// agree do: a netns dir elsewhere (containerd's netns_mounts_under_state_dir)
// is mounted at the same path and named in --netns-dir, the CRI socket's
// directory is mounted, the CNI bin dir is install-cni's target.
func TestChartValuesReachTheDaemon(t *testing.T) {
	const (
		netnsDir = "/run/containerd/io.containerd.grpc.v1.cri/netns"
		dataDir  = "/data/cni/hostlease"
		cniBin   = "/home/kubernetes/bin"
		socket   = "/run/k3s/containerd/containerd.sock"
	)
	objs := helmTemplate(t,
		"--set", "netnsDir="+netnsDir, "--set", "dataDir="+dataDir, "--set", "cniBinDir="+cniBin,
		"--set", "criEndpoint=unix://"+socket,
		"--set", "sweep.interval=10s", "--set", "sweep.misses=5", "--set", "sweep.grace=1m",
		"--set", "sweep.minAge=4m30s", "--set", "sweep.netnsGrace=2s", "--set", "sweep.maxReclaimFraction=0.25",
		"--set", "sweep.dryRun=true", "--set", "logFormat=json",
		"--set", "metrics.host=fd00::1", "--set", "metrics.port=19734",
		"--set", "extraArgs[0]=--no-api",
		"--set", "nodeSelector.kubernetes\\.io/os=linux", "--set", "priorityClassName=",
	)
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
	pod := ds.Spec.Template.Spec
	gcC := container(t, pod.Containers, "hostlease-gc")
	o := parseRunArgs(t, gcC)
	want := daemon.Options{CRIEndpoint: "unix://" + socket, DataDir: dataDir, Interval: 10 * time.Second, Misses: 5,
		Grace: time.Minute, MinAge: 4*time.Minute + 30*time.Second, NetnsGrace: 2 * time.Second, MaxReclaimFraction: 0.25,
		DryRun: true, MetricsAddr: "[fd00::1]:19734", ProbeSocket: "/tmp/probe/probe.sock", NodeName: "node-a", NoAPI: true, LogFormat: "json", LogLevel: "info",
		NetnsDir: netnsDir, ProcDir: daemon.DefaultProcDir, HTTP: daemon.RegisterRunFlags(flag.NewFlagSet("defaults", flag.ContinueOnError)).HTTP}
	if *o != want {
		t.Errorf("the daemon would run with\n  %+v\nwant\n  %+v", *o, want)
	}
	m, hp := hostMount(t, ds, gcC, netnsDir)
	if hp.Path != netnsDir || !m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("netns dir: host %s at %s readOnly=%v propagation=%v", hp.Path, m.MountPath, m.ReadOnly, m.MountPropagation)
	}
	if m, hp := hostMount(t, ds, gcC, dataDir); hp.Path != dataDir || m.ReadOnly {
		t.Errorf("data dir: host %s at %s readOnly=%v", hp.Path, m.MountPath, m.ReadOnly)
	}
	if _, hp := hostMount(t, ds, gcC, filepath.Dir(socket)); hp.Path != filepath.Dir(socket) {
		t.Errorf("CRI socket dir: host %s", hp.Path)
	}
	ic := container(t, pod.InitContainers, "install-cni")
	if _, hp := hostMount(t, ds, ic, "/host/opt/cni/bin"); hp.Path != cniBin {
		t.Errorf("install-cni writes into host %s, want %s", hp.Path, cniBin)
	}
	if p := gcC.Ports[0].ContainerPort; p != 19734 {
		t.Errorf("container port %d", p)
	}
	svc := find[*corev1.Service](t, objs, "Service", "hostlease-gc-metrics")
	if p := svc.Spec.Ports[0].Port; p != 19734 {
		t.Errorf("Service port %d", p)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || pod.PriorityClassName != "" {
		t.Errorf("nodeSelector %v priorityClassName %q", pod.NodeSelector, pod.PriorityClassName)
	}
}

// The keys every chart user sets reach the objects where Kubernetes reads
// them, and only there: a pull secret and the scheduling keys on the pod,
// pod annotations and labels on the pod template (not on the selector),
// annotations on the ServiceAccount, a digest in place of the tag in both
// containers.
func TestChartStandardKeys(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	objs := helmTemplate(t,
		"--set", "imagePullSecrets[0].name=regcred", "--set", "imagePullSecrets[1].name=mirror",
		"--set", "podAnnotations.example\\.com/team=net",
		"--set", "podLabels.team=net",
		"--set", "serviceAccount.annotations.iam\\.example\\.com/role=hostlease",
		"--set", "nodeSelector.kubernetes\\.io/arch=arm64",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=example.com/cni",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=In",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]=hostlease",
		"--set", "image.tag=v9.9.9", "--set", "image.digest="+digest,
	)
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
	pod := ds.Spec.Template
	if got := pod.Spec.ImagePullSecrets; !reflect.DeepEqual(got, []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}) {
		t.Errorf("imagePullSecrets %v, want regcred and mirror", got)
	}
	if got := pod.Annotations; !reflect.DeepEqual(got, map[string]string{"example.com/team": "net"}) {
		t.Errorf("pod annotations %v", got)
	}
	if got := pod.Labels; !reflect.DeepEqual(got, map[string]string{
		"app.kubernetes.io/name": "hostlease-gc", "app.kubernetes.io/part-of": "hostlease", "team": "net"}) {
		t.Errorf("pod labels %v, want the chart's and team=net", got)
	}
	if got := ds.Spec.Selector.MatchLabels; !reflect.DeepEqual(got, map[string]string{"app.kubernetes.io/name": "hostlease-gc"}) {
		t.Errorf("selector %v: podLabels must not reach it (a selector is immutable)", got)
	}
	if got := pod.Spec.NodeSelector; !reflect.DeepEqual(got, map[string]string{"kubernetes.io/arch": "arm64"}) {
		t.Errorf("nodeSelector %v", got)
	}
	want := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "example.com/cni", Operator: corev1.NodeSelectorOpIn, Values: []string{"hostlease"}}}}}}}}
	if got := pod.Spec.Affinity; !reflect.DeepEqual(got, want) {
		t.Errorf("affinity %+v, want %+v", got, want)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Image != "ghcr.io/hostlease/hostlease@"+digest {
			t.Errorf("container %s: image %q, want the digest to win over the tag", c.Name, c.Image)
		}
	}
	sa := find[*corev1.ServiceAccount](t, objs, "ServiceAccount", "hostlease-gc")
	if got := sa.Annotations; !reflect.DeepEqual(got, map[string]string{"iam.example.com/role": "hostlease"}) {
		t.Errorf("ServiceAccount annotations %v", got)
	}
	for _, o := range objs {
		if o.gvk.Kind != "DaemonSet" && o.gvk.Kind != "ServiceAccount" && strings.Contains(string(o.yaml), "example.com") {
			t.Errorf("%s carries a pod or ServiceAccount value:\n%s", objectKey(o), o.yaml)
		}
	}

	// Without a digest, the tag; without a tag, the chart's appVersion.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "image.tag=v9.9.9"}, "ghcr.io/hostlease/hostlease:v9.9.9"},
		{[]string{"--set", "image.repository=registry.example.com/hostlease"}, "registry.example.com/hostlease:dev"},
	} {
		ds := find[*appsv1.DaemonSet](t, helmTemplate(t, tc.args...), "DaemonSet", "hostlease-gc")
		for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
			if c.Image != tc.want {
				t.Errorf("%v: container %s: image %q, want %q", tc.args, c.Name, c.Image, tc.want)
			}
		}
	}

	// A pod label that would change what the selector matches is refused.
	_, err := runHelm(t, "template", release, chartDir, "--namespace", namespace, "--set", "podLabels.app\\.kubernetes\\.io/name=other")
	if err == nil || !strings.Contains(err.Error(), "podLabels may not set app.kubernetes.io/name") {
		t.Errorf("podLabels overriding the selector's label: %v, want a refusal naming it", err)
	}
}

// helm lint (strict: warnings fail) passes with the defaults, with every
// choice above and with the real-node suite's values.
func TestChartLint(t *testing.T) {
	cases := append(chartCases[:len(chartCases):len(chartCases)], struct {
		kustomize string
		values    []string
	}{"e2e/k8s's", []string{"-f", "../e2e/k8s/helm-values.yaml"}}, struct {
		kustomize string
		values    []string
	}{"the standard keys'", []string{
		"--set", "imagePullSecrets[0].name=regcred", "--set", "podAnnotations.a=b", "--set", "podLabels.team=net",
		"--set", "serviceAccount.annotations.a=b", "--set", "image.digest=sha256:" + strings.Repeat("ab", 32),
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=k",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
	}})
	for _, tc := range cases {
		args := append([]string{"lint", chartDir, "--strict", "--namespace", namespace}, tc.values...)
		if out, err := runHelm(t, args...); err != nil {
			t.Errorf("%s values: %v\n%s", tc.kustomize, err, out)
		}
	}
}

// stripComments drops comment lines (a document of comments only is empty).
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}
