package deploy_test

// Tests of everything under deploy/: the kustomize base, components and
// overlays (built with krusty, decoded strictly), the DaemonSet's wiring to
// the daemon's real flag set, the Prometheus rules (promtool), the dashboard,
// the generated PrometheusRule, and the example CNI conflists.
//
// Regenerate deploy/components/monitoring/prometheusrule.yaml after editing
// deploy/prometheus/hostlease-rules.yaml:
//
//	HOSTLEASE_UPDATE=1 go test ./deploy -run TestPrometheusRuleInSync

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/pool"
	"github.com/hostlease/hostlease/pkg/gc"
)

const (
	namespace = "hostlease-system"
	// jobName is the Prometheus job of the daemon's targets: the ServiceMonitor
	// takes it from the Service's app.kubernetes.io/name label, the plain
	// Prometheus example names its job so, and every rule selects on it.
	jobName = "hostlease-gc"

	rulesFile          = "prometheus/hostlease-rules.yaml"
	prometheusRuleFile = "components/monitoring/prometheusrule.yaml"
	dashboardFile      = "dashboards/hostlease.json"
	runbookFile        = "../docs/runbook.md"

	containerdSocket = "/run/containerd/containerd.sock"
	crioSocket       = "/var/run/crio/crio.sock"
)

// kustomizations lists every kustomization that must build, with the CRI
// socket its DaemonSet must use. A new overlay must be added here.
var kustomizations = map[string]string{
	"base":             containerdSocket,
	"overlays/example": containerdSocket,
	"overlays/crio":    crioSocket,
}

// ---------------------------------------------------------------------------
// kustomize build + strict decoding

type object struct {
	gvk       schema.GroupVersionKind
	name      string
	namespace string
	yaml      []byte
	typed     runtime.Object             // for kinds client-go knows
	u         *unstructured.Unstructured // always
}

var (
	buildMu    sync.Mutex
	buildCache = map[string][]object{}
)

var strictYAML = k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	k8sjson.SerializerOptions{Yaml: true, Strict: true})

// build runs kustomize (krusty, as `kubectl apply -k` does) on deploy/<dir>
// and decodes every object: strictly into its typed client-go object, or, for
// prometheus-operator kinds, as unstructured with their fields checked.
func build(t *testing.T, dir string) []object {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if objs, ok := buildCache[dir]; ok {
		return objs
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []object
	for _, res := range resMap.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, res.CurId(), err)
		}
		o, err := decode(y)
		if err != nil {
			t.Fatalf("%s: %v\n%s", dir, err, y)
		}
		objs = append(objs, o)
	}
	buildCache[dir] = objs
	return objs
}

func decode(y []byte) (object, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(y, &u.Object); err != nil {
		return object{}, err
	}
	o := object{gvk: u.GroupVersionKind(), name: u.GetName(), namespace: u.GetNamespace(), yaml: y, u: u}
	id := fmt.Sprintf("%s %s/%s", o.gvk.Kind, o.namespace, o.name)
	if o.name == "" {
		return o, fmt.Errorf("%s: no metadata.name", id)
	}
	if scheme.Scheme.Recognizes(o.gvk) {
		obj, gvk, err := strictYAML.Decode(y, nil, nil)
		if err != nil {
			return o, fmt.Errorf("%s: strict decode: %w", id, err)
		}
		if *gvk != o.gvk {
			return o, fmt.Errorf("%s: decoded as %v", id, gvk)
		}
		o.typed = obj
		return o, nil
	}
	if o.gvk.Group == "monitoring.coreos.com" {
		if err := checkPrometheusOperatorObject(u); err != nil {
			return o, fmt.Errorf("%s: %w", id, err)
		}
		return o, nil
	}
	return o, fmt.Errorf("%s: kind not known to client-go nor prometheus-operator", id)
}

// Fields of the prometheus-operator CRDs (monitoring.coreos.com/v1) we accept;
// anything else is an error, as it would be for a typed object.
var (
	serviceMonitorSpecFields = set("jobLabel", "targetLabels", "podTargetLabels", "endpoints", "selector",
		"namespaceSelector", "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
		"labelValueLengthLimit", "attachMetadata", "scrapeProtocols", "selectorMechanism")
	podMonitorSpecFields = set("jobLabel", "podTargetLabels", "podMetricsEndpoints", "selector",
		"namespaceSelector", "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
		"labelValueLengthLimit", "attachMetadata", "scrapeProtocols", "selectorMechanism")
	endpointFields = set("port", "portNumber", "targetPort", "path", "scheme", "params", "interval",
		"scrapeTimeout", "tlsConfig", "bearerTokenSecret", "authorization", "honorLabels",
		"honorTimestamps", "trackTimestampsStaleness", "basicAuth", "oauth2", "metricRelabelings",
		"relabelings", "proxyUrl", "followRedirects", "enableHttp2", "filterRunning")
	relabelFields  = set("sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action")
	relabelActions = set("replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
		"labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase",
		"Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual", "dropequal", "DropEqual")
	ruleGroupFields = set("name", "interval", "rules", "partial_response_strategy", "limit", "query_offset", "labels")
	ruleFields      = set("alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations")
	metadataFields  = set("name", "namespace", "labels", "annotations")
)

func set(s ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return m
}

func onlyFields(what string, m map[string]any, allowed map[string]bool) error {
	for k := range m {
		if !allowed[k] {
			return fmt.Errorf("%s: unknown field %q", what, k)
		}
	}
	return nil
}

func checkPrometheusOperatorObject(u *unstructured.Unstructured) error {
	if u.GetAPIVersion() != "monitoring.coreos.com/v1" {
		return fmt.Errorf("apiVersion %s, want monitoring.coreos.com/v1", u.GetAPIVersion())
	}
	if err := onlyFields("top level", u.Object, set("apiVersion", "kind", "metadata", "spec")); err != nil {
		return err
	}
	md, _ := u.Object["metadata"].(map[string]any)
	if err := onlyFields("metadata", md, metadataFields); err != nil {
		return err
	}
	if u.GetNamespace() == "" {
		return errors.New("metadata.namespace is empty")
	}
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return errors.New("no spec")
	}
	switch u.GetKind() {
	case "ServiceMonitor", "PodMonitor":
		fields, epKey := serviceMonitorSpecFields, "endpoints"
		if u.GetKind() == "PodMonitor" {
			fields, epKey = podMonitorSpecFields, "podMetricsEndpoints"
		}
		if err := onlyFields("spec", spec, fields); err != nil {
			return err
		}
		if _, ok := spec["selector"].(map[string]any); !ok {
			return errors.New("spec.selector is required")
		}
		eps, _ := spec[epKey].([]any)
		if len(eps) == 0 {
			return fmt.Errorf("spec.%s is required and must not be empty", epKey)
		}
		for i, e := range eps {
			ep, ok := e.(map[string]any)
			if !ok {
				return fmt.Errorf("spec.%s[%d] is not an object", epKey, i)
			}
			if err := onlyFields(fmt.Sprintf("spec.%s[%d]", epKey, i), ep, endpointFields); err != nil {
				return err
			}
			if ep["port"] == nil && ep["targetPort"] == nil && ep["portNumber"] == nil {
				return fmt.Errorf("spec.%s[%d] names no port", epKey, i)
			}
			for _, key := range []string{"interval", "scrapeTimeout"} {
				if v, ok := ep[key]; ok {
					if _, err := model.ParseDuration(fmt.Sprint(v)); err != nil {
						return fmt.Errorf("spec.%s[%d].%s: %v", epKey, i, key, err)
					}
				}
			}
			for _, key := range []string{"relabelings", "metricRelabelings"} {
				rls, _ := ep[key].([]any)
				for j, r := range rls {
					rl, _ := r.(map[string]any)
					if err := onlyFields(fmt.Sprintf("spec.%s[%d].%s[%d]", epKey, i, key, j), rl, relabelFields); err != nil {
						return err
					}
					if a, ok := rl["action"]; ok && !relabelActions[fmt.Sprint(a)] {
						return fmt.Errorf("relabel action %v", a)
					}
				}
			}
		}
	case "PrometheusRule":
		if err := onlyFields("spec", spec, set("groups")); err != nil {
			return err
		}
		groups, _ := spec["groups"].([]any)
		if len(groups) == 0 {
			return errors.New("spec.groups is required and must not be empty")
		}
		for i, g := range groups {
			grp, _ := g.(map[string]any)
			if err := onlyFields(fmt.Sprintf("spec.groups[%d]", i), grp, ruleGroupFields); err != nil {
				return err
			}
			if s, _ := grp["name"].(string); s == "" {
				return fmt.Errorf("spec.groups[%d].name is required", i)
			}
			rules, _ := grp["rules"].([]any)
			if len(rules) == 0 {
				return fmt.Errorf("spec.groups[%d].rules is empty", i)
			}
			for j, r := range rules {
				rule, _ := r.(map[string]any)
				where := fmt.Sprintf("spec.groups[%d].rules[%d]", i, j)
				if err := onlyFields(where, rule, ruleFields); err != nil {
					return err
				}
				_, isAlert := rule["alert"].(string)
				_, isRecord := rule["record"].(string)
				if isAlert == isRecord {
					return fmt.Errorf("%s: exactly one of alert, record", where)
				}
				if s, _ := rule["expr"].(string); strings.TrimSpace(s) == "" {
					return fmt.Errorf("%s: expr is required", where)
				}
				if v, ok := rule["for"]; ok {
					if _, err := model.ParseDuration(fmt.Sprint(v)); err != nil {
						return fmt.Errorf("%s.for: %v", where, err)
					}
				}
				for _, key := range []string{"labels", "annotations"} {
					if v, ok := rule[key]; ok {
						m, ok := v.(map[string]any)
						if !ok {
							return fmt.Errorf("%s.%s is not a map", where, key)
						}
						for k, val := range m {
							if _, ok := val.(string); !ok {
								return fmt.Errorf("%s.%s.%s is not a string", where, key, k)
							}
						}
					}
				}
			}
		}
	default:
		return fmt.Errorf("unexpected prometheus-operator kind %s", u.GetKind())
	}
	return nil
}

func find[T runtime.Object](t *testing.T, objs []object, kind, name string) T {
	t.Helper()
	var zero T
	for _, o := range objs {
		if o.gvk.Kind == kind && o.name == name {
			typed, ok := o.typed.(T)
			if !ok {
				t.Fatalf("%s %s decoded as %T", kind, name, o.typed)
			}
			return typed
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return zero
}

func findU(t *testing.T, objs []object, kind string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.gvk.Kind == kind {
			out = append(out, o.u)
		}
	}
	return out
}

func TestKustomizeBuilds(t *testing.T) {
	overlays, err := filepath.Glob("overlays/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		if _, ok := kustomizations[o]; !ok {
			t.Errorf("overlay %s is not listed in kustomizations (add it with its CRI socket)", o)
		}
	}
	clusterScoped := set("Namespace", "ClusterRole", "ClusterRoleBinding")
	for dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.gvk.Kind]++
				if clusterScoped[o.gvk.Kind] {
					if o.namespace != "" {
						t.Errorf("%s %s: cluster-scoped object with namespace %q", o.gvk.Kind, o.name, o.namespace)
					}
				} else if o.namespace != namespace {
					t.Errorf("%s %s: namespace %q, want %q", o.gvk.Kind, o.name, o.namespace, namespace)
				}
			}
			for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service"} {
				if kinds[k] != 1 {
					t.Errorf("%d objects of kind %s, want 1", kinds[k], k)
				}
			}
			if dir == "overlays/example" {
				for _, k := range []string{"ServiceMonitor", "PrometheusRule", "ConfigMap"} {
					if kinds[k] != 1 {
						t.Errorf("%d objects of kind %s, want 1", kinds[k], k)
					}
				}
			}
			ns := find[*corev1.Namespace](t, objs, "Namespace", namespace)
			if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("namespace must allow privileged pods (hostPath, hostNetwork): labels %v", ns.Labels)
			}
		})
	}
}

// A manifest with an unknown field must be rejected: proves the decoding is
// strict and that the checks above would catch a typo.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	bad := []string{
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        imagee: foo\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIP: None, clusterIP: None}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x, namespace: y}\nspec: {selector: {}, endpoints: [{prot: metrics}]}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x, namespace: y}\nspec: {groups: [{name: g, rules: [{alert: A, expr: up, for: 5 minutes}]}]}\n",
		"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n",
	}
	for _, y := range bad {
		if _, err := decode([]byte(y)); err == nil {
			t.Errorf("accepted:\n%s", y)
		}
	}
}

// ---------------------------------------------------------------------------
// DaemonSet

// expandVars expands $(VAR) references as the kubelet does for args, from the
// container's env; fieldRef/resourceFieldRef values get test stand-ins.
func expandVars(t *testing.T, c corev1.Container, s string) string {
	t.Helper()
	vals := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vals[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			vals[e.Name] = "node-a"
		case e.ValueFrom.ResourceFieldRef != nil:
			vals[e.Name] = "268435456"
		}
	}
	out := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vals[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
	if strings.Contains(out, "$(") {
		t.Errorf("unresolved variable in %q", out)
	}
	return out
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// hostMount returns the hostPath volume mounted at mountPath in c.
func hostMount(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, mountPath string) (corev1.VolumeMount, *corev1.HostPathVolumeSource) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(mountPath) {
			continue
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				if v.HostPath == nil {
					t.Fatalf("volume %s at %s is not a hostPath", v.Name, mountPath)
				}
				return m, v.HostPath
			}
		}
		t.Fatalf("mount %s refers to missing volume %s", mountPath, m.Name)
	}
	t.Fatalf("container %s has no mount at %s", c.Name, mountPath)
	return corev1.VolumeMount{}, nil
}

func parseRunArgs(t *testing.T, c corev1.Container) *gc.Options {
	t.Helper()
	if len(c.Command) != 1 || c.Command[0] != "/hostlease-gc" {
		t.Fatalf("command %q, want [/hostlease-gc]", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("args %q do not start with the run subcommand", c.Args)
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, expandVars(t, c, a))
	}
	t.Setenv("NODE_NAME", "") // the flag must be set by the args, not inherited
	fs := flag.NewFlagSet("hostlease-gc run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := gc.RegisterRunFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("args %q: %v", args, err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("stray arguments %q", fs.Args())
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("args %q: Validate: %v", args, err)
	}
	for _, name := range []string{"node-name", "data-dir", "cri-endpoint", "metrics-addr"} {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		if !set {
			t.Errorf("--%s is not passed explicitly", name)
		}
	}
	return o
}

func TestDaemonSet(t *testing.T) {
	for dir, wantSocket := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
			pod := ds.Spec.Template.Spec
			gcC := container(t, pod.Containers, "hostlease-gc")
			o := parseRunArgs(t, gcC)

			if o.NodeName != "node-a" {
				t.Errorf("--node-name resolves to %q, want the downward API's spec.nodeName", o.NodeName)
			}
			if o.DataDir != gc.DefaultDataDir || o.NetnsDir != gc.DefaultNetnsDir || o.MetricsAddr != gc.DefaultMetricsAddr {
				t.Errorf("data dir %q, netns dir %q, metrics addr %q differ from the daemon's defaults",
					o.DataDir, o.NetnsDir, o.MetricsAddr)
			}
			if wantEndpoint := "unix://" + wantSocket; o.CRIEndpoint != wantEndpoint {
				t.Errorf("--cri-endpoint=%s, want %s", o.CRIEndpoint, wantEndpoint)
			}
			if wantSocket == containerdSocket && o.CRIEndpoint != gc.DefaultCRIEndpoint {
				t.Errorf("containerd endpoint %s differs from the daemon's default %s", o.CRIEndpoint, gc.DefaultCRIEndpoint)
			}

			// Host paths: the same path inside as on the host.
			m, hp := hostMount(t, ds, gcC, o.DataDir)
			if hp.Path != o.DataDir || m.ReadOnly {
				t.Errorf("data dir: host %s mounted at %s readOnly=%v; want %s read-write", hp.Path, m.MountPath, m.ReadOnly, o.DataDir)
			}
			m, hp = hostMount(t, ds, gcC, o.NetnsDir)
			if hp.Path != o.NetnsDir || !m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
				t.Errorf("netns dir: host %s at %s readOnly=%v propagation=%v; want %s, read-only, HostToContainer",
					hp.Path, m.MountPath, m.ReadOnly, m.MountPropagation, o.NetnsDir)
			}
			sock := strings.TrimPrefix(o.CRIEndpoint, "unix://")
			m, hp = hostMount(t, ds, gcC, filepath.Dir(sock))
			if hp.Path != filepath.Dir(wantSocket) {
				t.Errorf("CRI socket dir: host %s mounted at %s, want host %s", hp.Path, m.MountPath, filepath.Dir(wantSocket))
			}
			for _, mnt := range gcC.VolumeMounts {
				if mnt.MountPath != o.DataDir && mnt.MountPath != o.NetnsDir && mnt.MountPath != filepath.Dir(sock) && mnt.MountPath != "/tmp" {
					t.Errorf("unexpected mount %s in hostlease-gc", mnt.MountPath)
				}
			}

			// Probes and port.
			_, port, err := net.SplitHostPort(o.MetricsAddr)
			if err != nil {
				t.Fatal(err)
			}
			var metricsPort *corev1.ContainerPort
			for i, p := range gcC.Ports {
				if p.Name == "metrics" {
					metricsPort = &gcC.Ports[i]
				}
			}
			if metricsPort == nil || fmt.Sprint(metricsPort.ContainerPort) != port || port != "9734" {
				t.Errorf("container port metrics = %v, want %s (from --metrics-addr) = 9734", metricsPort, port)
			}
			for probe, path := range map[*corev1.Probe]string{gcC.LivenessProbe: "/healthz", gcC.ReadinessProbe: "/readyz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "metrics" {
					t.Errorf("probe for %s: %+v", path, probe)
				}
			}
			if n := gcC.Env; len(n) == 0 || func() bool {
				for _, e := range n {
					if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
						return false
					}
				}
				return true
			}() {
				t.Errorf("NODE_NAME does not come from the downward API spec.nodeName")
			}

			// Scheduling.
			if pod.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", pod.PriorityClassName)
			}
			tolerateAll := false
			for _, tol := range pod.Tolerations {
				tolerateAll = tolerateAll || (tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "")
			}
			if !tolerateAll {
				t.Errorf("tolerations %+v do not tolerate every taint", pod.Tolerations)
			}
			if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork=%v dnsPolicy=%s: the daemon must not depend on the pool it repairs", pod.HostNetwork, pod.DNSPolicy)
			}
			if pod.HostPID || pod.HostIPC {
				t.Errorf("hostPID/hostIPC are not needed")
			}
			sel := ds.Spec.Selector.MatchLabels
			for k, v := range sel {
				if ds.Spec.Template.Labels[k] != v {
					t.Errorf("selector %v does not match template labels %v", sel, ds.Spec.Template.Labels)
				}
			}

			// Security and resources for every container.
			all := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
			for _, c := range all {
				checkContainerSecurity(t, c)
				for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
					if rl.Cpu().IsZero() || rl.Memory().IsZero() {
						t.Errorf("%s: requests and limits need cpu and memory: %+v", c.Name, c.Resources)
					}
				}
				if c.Image != gcC.Image {
					t.Errorf("%s: image %s differs from %s", c.Name, c.Image, gcC.Image)
				}
			}
			if dir == "overlays/example" && !strings.HasSuffix(gcC.Image, ":v0.1.0") {
				t.Errorf("example overlay image %s, want tag v0.1.0", gcC.Image)
			}

			// install-cni.
			ic := container(t, pod.InitContainers, "install-cni")
			m, hp = hostMount(t, ds, ic, "/host/opt/cni/bin")
			if hp.Path != "/opt/cni/bin" || m.ReadOnly {
				t.Errorf("install-cni: host %s at %s readOnly=%v", hp.Path, m.MountPath, m.ReadOnly)
			}
			if sa := pod.ServiceAccountName; sa != "hostlease-gc" {
				t.Errorf("serviceAccountName %q", sa)
			}
			_ = find[*corev1.ServiceAccount](t, objs, "ServiceAccount", pod.ServiceAccountName)
		})
	}
}

func checkContainerSecurity(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", c.Name)
		return
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem must be true", c.Name)
	}
	if sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: capabilities must drop ALL and add none: %+v", c.Name, sc.Capabilities)
	}
	// Root is needed (root-owned CRI socket, stores, /opt/cni/bin) and must be
	// explicit, since the image's default user is nonroot.
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: runAsUser must be 0 explicitly", c.Name)
	}
}

// The install-cni script really installs atomically: run it with sh against
// a temporary "host" bin dir holding an old binary.
func TestInstallCNIScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	objs := build(t, "base")
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
	ic := container(t, ds.Spec.Template.Spec.InitContainers, "install-cni")
	if len(ic.Command) != 2 || ic.Command[0] != "/busybox/sh" || ic.Command[1] != "-c" || len(ic.Args) != 1 {
		t.Fatalf("install-cni command %q args %q: want /busybox/sh -c SCRIPT", ic.Command, ic.Args)
	}
	script := ic.Args[0]
	if !strings.Contains(script, `tmp="$dir/`) || !strings.Contains(script, `mv -f "$tmp" "$dir/hostlease"`) {
		t.Fatalf("script does not copy into the target dir and rename:\n%s", script)
	}

	tmp := t.TempDir()
	src := filepath.Join(tmp, "hostlease")
	bin := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(bin, "hostlease")
	if err := os.WriteFile(old, []byte("old binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	oldFile, err := os.Open(old) // like a plugin being exec'd during the upgrade
	if err != nil {
		t.Fatal(err)
	}
	defer oldFile.Close()
	oldInfo, _ := oldFile.Stat()
	for i, content := range []string{"new binary v1", "new binary v2"} {
		if err := os.WriteFile(src, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "HOSTLEASE_SRC="+src, "HOSTLEASE_CNI_BIN_DIR="+bin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
		got, err := os.ReadFile(old)
		if err != nil || string(got) != content {
			t.Fatalf("run %d: installed %q, %v", i, got, err)
		}
		st, _ := os.Stat(old)
		if st.Mode().Perm() != 0o755 {
			t.Errorf("run %d: mode %v", i, st.Mode())
		}
		if os.SameFile(st, oldInfo) {
			t.Errorf("run %d: the old file was overwritten in place, not replaced by rename", i)
		}
		entries, _ := os.ReadDir(bin)
		if len(entries) != 1 {
			t.Errorf("run %d: leftovers in bin dir: %v", i, entries)
		}
	}
	// The old inode is intact for whoever had it open.
	b, _ := io.ReadAll(oldFile)
	if string(b) != "old binary" {
		t.Errorf("old open file reads %q", b)
	}

	// A failing copy leaves neither a temp file nor a broken binary.
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "HOSTLEASE_SRC="+filepath.Join(tmp, "missing"), "HOSTLEASE_CNI_BIN_DIR="+bin)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("missing source did not fail:\n%s", out)
	}
	entries, _ := os.ReadDir(bin)
	if got, _ := os.ReadFile(old); len(entries) != 1 || string(got) != "new binary v2" {
		t.Errorf("after a failed install: entries %v, binary %q", entries, got)
	}
}

// The image the manifests reference is built by the Dockerfile as they expect.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"FROM --platform=$BUILDPLATFORM golang:1.26 AS build",
		"ENV CGO_ENABLED=0",
		"-o /out/hostlease ./cmd/ipam",
		"-o /out/hostlease-gc ./cmd/ipam-gc",
		"-X github.com/hostlease/hostlease/pkg/gc.Version=${VERSION}",
		"-X main.buildVersion=${VERSION}",
		"COPY --from=build /out/hostlease /hostlease",
		"COPY --from=build /out/hostlease-gc /hostlease-gc",
		`ENTRYPOINT ["/hostlease-gc"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// install-cni runs /busybox/sh: the final stage must be a distroless
	// "debug" image, which has busybox there.
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if last := froms[len(froms)-1][1]; !strings.HasPrefix(last, "gcr.io/distroless/static") || !strings.Contains(last, ":debug") {
		t.Errorf("final stage %s: install-cni needs busybox at /busybox (distroless static debug)", last)
	}
}

// ---------------------------------------------------------------------------
// RBAC and metrics wiring

func TestRBAC(t *testing.T) {
	objs := build(t, "base")
	cr := find[*rbacv1.ClusterRole](t, objs, "ClusterRole", "hostlease-gc")
	type grant struct{ group, resource, verb string }
	var got []string
	for _, r := range cr.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got = append(got, fmt.Sprint(grant{g, res, v}))
				}
			}
		}
	}
	// Exactly what pkg/gc/kube.go uses (a node-filtered pod informer, Events
	// created); e2e/k8s checks the same against a real API server.
	want := []string{
		fmt.Sprint(grant{"", "events", "create"}),
		fmt.Sprint(grant{"", "pods", "list"}), fmt.Sprint(grant{"", "pods", "watch"}),
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole grants\n%v\nwant exactly\n%v", got, want)
	}
	crb := find[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "hostlease-gc")
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != cr.Name ||
		len(crb.Subjects) != 1 || crb.Subjects[0].Kind != "ServiceAccount" ||
		crb.Subjects[0].Name != "hostlease-gc" || crb.Subjects[0].Namespace != namespace {
		t.Errorf("ClusterRoleBinding %+v", crb)
	}
}

func TestMetricsScrapeWiring(t *testing.T) {
	objs := build(t, "overlays/example")
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
	svc := find[*corev1.Service](t, objs, "Service", "hostlease-gc-metrics")
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %v does not select the DaemonSet's pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].Port != 9734 ||
		svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v", svc.Spec.Ports)
	}
	sms := findU(t, objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors", len(sms))
	}
	sm := sms[0]
	matchLabels, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(matchLabels) == 0 {
		t.Errorf("ServiceMonitor has no selector.matchLabels")
	}
	for k, v := range matchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %v does not select Service labels %v", matchLabels, svc.Labels)
		}
	}
	nsNames, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if !reflect.DeepEqual(nsNames, []string{namespace}) {
		t.Errorf("namespaceSelector %v", nsNames)
	}
	jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
	if svc.Labels[jobLabel] != jobName {
		t.Errorf("job label: Service label %q = %q, the rules expect job=%q", jobLabel, svc.Labels[jobLabel], jobName)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ep := eps[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" {
		t.Errorf("endpoint %v", ep)
	}
	rel, _ := json.Marshal(ep["relabelings"])
	if !strings.Contains(string(rel), `"__meta_kubernetes_pod_node_name"`) || !strings.Contains(string(rel), `"targetLabel":"node"`) {
		t.Errorf("ServiceMonitor does not add the node label: %s", rel)
	}
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		for _, u := range findU(t, objs, kind) {
			if u.GetLabels()["release"] == "" {
				t.Errorf("%s has no release label for kube-prometheus-stack's selector", kind)
			}
		}
	}

	// The plain Prometheus example uses the same job name and rule file.
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName string `json:"job_name"`
		} `json:"scrape_configs"`
	}
	b, err := os.ReadFile("prometheus/prometheus.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != jobName ||
		!reflect.DeepEqual(cfg.RuleFiles, []string{"hostlease-rules.yaml"}) {
		t.Errorf("prometheus.example.yaml: %+v", cfg)
	}

	// Every selector on `job` in the rules is job="hostlease-gc".
	for _, r := range loadRules(t) {
		for _, m := range regexp.MustCompile(`job\s*(=~|!=|!~|=)\s*"([^"]*)"`).FindAllStringSubmatch(r.Expr, -1) {
			if m[1] != "=" || m[2] != jobName {
				t.Errorf("%s: job matcher %s, want job=%q", r.Alert, m[0], jobName)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Prometheus rules

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range rf.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return out
}

// The alerts deploy/ must ship (see the design and docs/runbook.md).
var requiredAlerts = []string{
	"HostleasePoolNearlyExhausted",
	"HostleasePoolExhausted",
	"HostleaseLeakRateHigh",
	"HostleaseLeakCandidatesStuck",
	"HostleaseMassReclaimGuardTripped",
	"HostleaseDaemonDown",
	"HostleaseCRIUnreachable",
	"HostleaseSweepsFailing",
	"HostleaseAddressNotRecorded",
	"HostleaseAddressConflict",
	"HostleaseDamagedRecords",
	"HostleaseStoreErrors",
}

// githubAnchor is the anchor GitHub renders for a markdown heading.
func githubAnchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile(`[^\p{L}\p{N} _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func TestRulesAnnotationsAndRunbook(t *testing.T) {
	rb, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`).FindAllStringSubmatch(string(rb), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		seen[r.Alert] = true
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		if len(r.Annotations) != 3 {
			t.Errorf("%s: annotations %v, want exactly summary, description, runbook_url", r.Alert, r.Annotations)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q", r.Alert, s)
		}
		const prefix = "https://github.com/hostlease/hostlease/blob/main/docs/runbook.md#"
		url := r.Annotations["runbook_url"]
		if !strings.HasPrefix(url, prefix) {
			t.Errorf("%s: runbook_url %s does not point into docs/runbook.md", r.Alert, url)
		} else if anchor := strings.TrimPrefix(url, prefix); anchor != strings.ToLower(r.Alert) || !anchors[anchor] {
			t.Errorf("%s: runbook anchor #%s: want #%s, a heading of docs/runbook.md", r.Alert, anchor, strings.ToLower(r.Alert))
		}
	}
	for _, a := range requiredAlerts {
		if !seen[a] {
			t.Errorf("alert %s missing from %s", a, rulesFile)
		}
	}
	for a := range seen {
		if !anchors[strings.ToLower(a)] {
			t.Errorf("docs/runbook.md has no section %s", a)
		}
	}
}

// renderPrometheusRule wraps the rules file's groups, verbatim, in a
// PrometheusRule.
func renderPrometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`# Code generated from deploy/prometheus/hostlease-rules.yaml by deploy/deploy_test.go; DO NOT EDIT.
# Regenerate: HOSTLEASE_UPDATE=1 go test ./deploy -run TestPrometheusRuleInSync
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: hostlease
  namespace: hostlease-system
  labels:
    app.kubernetes.io/name: hostlease-gc
    app.kubernetes.io/part-of: hostlease
spec:
`)
	lines := strings.Split(string(rules), "\n")
	start := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "groups:") {
			start = i
			break
		}
	}
	for _, l := range lines[start:] {
		if l != "" {
			b.WriteString("  " + l)
		}
		b.WriteString("\n")
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

func TestPrometheusRuleInSync(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := append(renderPrometheusRule(rules), '\n')
	got, err := os.ReadFile(prometheusRuleFile)
	if os.Getenv("HOSTLEASE_UPDATE") != "" {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err = want, nil
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s (err %v); regenerate with\n  HOSTLEASE_UPDATE=1 go test ./deploy -run TestPrometheusRuleInSync",
			prometheusRuleFile, rulesFile, err)
	}

	// And semantically, after kustomize: the same groups.
	var plain map[string]any
	if err := yaml.Unmarshal(rules, &plain); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"overlays/example"} {
		prs := findU(t, build(t, dir), "PrometheusRule")
		if len(prs) != 1 {
			t.Fatalf("%s: %d PrometheusRules", dir, len(prs))
		}
		if !reflect.DeepEqual(prs[0].Object["spec"].(map[string]any)["groups"], plain["groups"]) {
			t.Errorf("%s: PrometheusRule groups differ from %s", dir, rulesFile)
		}
	}
}

var (
	promtoolOnce sync.Once
	promtoolPath string
	promtoolErr  error
)

// promtool finds promtool, installing it with hack/install-promtool.sh when
// running as root; otherwise the test is skipped, saying why.
func promtool(t *testing.T) string {
	t.Helper()
	promtoolOnce.Do(func() {
		if p, err := exec.LookPath("promtool"); err == nil {
			promtoolPath = p
			return
		}
		if os.Geteuid() != 0 {
			return
		}
		cmd := exec.Command("bash", "../hack/install-promtool.sh")
		out, err := cmd.CombinedOutput()
		if err != nil {
			promtoolErr = fmt.Errorf("hack/install-promtool.sh: %v\n%s", err, out)
			return
		}
		promtoolPath, promtoolErr = exec.LookPath("promtool")
	})
	if promtoolErr != nil {
		t.Fatal(promtoolErr)
	}
	if promtoolPath == "" {
		fmt.Println("SKIP: promtool is not installed and this test is not running as root, so it cannot install it; run `bash hack/install-promtool.sh` as root (or install promtool) to run the Prometheus rule tests")
		t.Skip("promtool not installed and not root: cannot run promtool check/test rules (run hack/install-promtool.sh as root)")
	}
	return promtoolPath
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTests []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func TestPromtoolRules(t *testing.T) {
	// Read everything promtool reads, so `go test`'s cache notices changes.
	if _, err := os.ReadFile(rulesFile); err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob("prometheus/tests/*.yaml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests: %v", err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf ruleTestFile
		if err := yaml.Unmarshal(b, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !reflect.DeepEqual(tf.RuleFiles, []string{"../hostlease-rules.yaml"}) {
			t.Errorf("%s: rule_files %v", f, tf.RuleFiles)
		}
		for _, tc := range tf.Tests {
			for _, at := range tc.AlertRuleTests {
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname] = true
				} else {
					quiet[at.Alertname] = true
				}
			}
		}
	}
	for _, r := range loadRules(t) {
		if r.Alert != "" && (!firing[r.Alert] || !quiet[r.Alert]) {
			t.Errorf("%s: rule tests must cover it firing (%v) and not firing (%v)", r.Alert, firing[r.Alert], quiet[r.Alert])
		}
	}

	out := runPromtool(t, "check", "rules", rulesFile)
	t.Logf("%s", out)
	out = runPromtool(t, append([]string{"test", "rules"}, tests...)...)
	t.Logf("%s", out)
	if !strings.Contains(out, "SUCCESS") || strings.Contains(out, "FAILED") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// ---------------------------------------------------------------------------
// Metric names: rules and dashboard use only what the daemon exports.

// exportedNames builds the daemon's collector with gc.NewMetrics, gives it
// the report of a sweep over one network (one range set, one exhaustion) so
// that every metric has a sample, scrapes it over HTTP and returns the names
// a query may use (histograms with their _bucket/_sum/_count series).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := gc.NewMetrics(reg)
	m.Observe(&gc.SweepReport{Result: gc.SweepOK, CRIReached: true, Networks: []*gc.NetworkReport{{Network: "n",
		Snapshot: &gc.Snapshot{RangeSets: make([]allocator.StoredRangeSet, 1),
			Usage:       []pool.Usage{{RangeSet: 0, Size: big.NewInt(4)}},
			Exhaustions: map[int]allocator.Exhaustion{0: {Count: 1, Last: time.Unix(1700000000, 0)}}}}}}, time.Now())
	descs := make(chan *prometheus.Desc, 100)
	m.Describe(descs)
	close(descs)
	populated := len(descs)
	if populated == 0 {
		t.Fatal("gc.Metrics describes no metric")
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	names := map[string]bool{}
	for name, mf := range families {
		if len(mf.GetMetric()) == 0 {
			t.Errorf("%s exported without samples", name)
		}
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	if len(names) < populated {
		t.Fatalf("scrape has %d names for %d metrics", len(names), populated)
	}
	return names
}

var promqlKeywords = set("and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
	"group_right", "bool", "offset", "inf", "nan", "atan2", "start", "end")

// metricNames returns the metric names an (unparsed) PromQL expression
// selects: identifiers outside strings, label matchers, ranges and grouping
// clauses that are not functions, aggregations or keywords.
func metricNames(expr string) []string {
	s := regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`+"`[^`]*`").ReplaceAllString(expr, `""`)
	s = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(s, "{}")
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, "[]")
	s = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\$\{?\w+\}?`).ReplaceAllString(s, " ")
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdent(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\n' || s[k] == '\t') {
				k++
			}
			if !(k < len(s) && s[k] == '(') && !promqlKeywords[strings.ToLower(word)] {
				out = append(out, word)
			}
			i = j
		default:
			i++
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func TestMetricNamesTokenizer(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.9, sum by (le) (rate(hostlease_sweep_duration_seconds_bucket{node=~"$node"}[$__rate_interval])))`: "hostlease_sweep_duration_seconds_bucket",
		`absent(up{job="hostlease-gc"}) or up{job="hostlease-gc"} == 0`:                                                         "up up",
		`time() - foo > 600 and bar > 0`:                                             "foo bar",
		`sum without (reason) (increase(x_total{reason="a|b"}[1h])) > 2e1 offset 5m`: "x_total",
		`1 - a / (b > 0) < 0.10`:                                                     "a b",
		`count by (version, goversion) (build_info{})`:                               "build_info",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d, b
}

// dashboardQueries returns every PromQL expression of the dashboard (panel
// targets and template variable queries), with Grafana's variables replaced
// by values PromQL accepts.
func dashboardQueries(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	repl := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m",
		`"$node"`, `".*"`, `"$network"`, `".*"`)
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[fmt.Sprintf("panel %d %q %s", p.ID, p.Title, tg.RefID)] = repl.Replace(tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		qs, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(qs)
		if m == nil {
			t.Errorf("template variable %s: query %q is not label_values(selector, label)", v.Name, qs)
			continue
		}
		out["variable "+v.Name] = repl.Replace(m[1])
	}
	return out
}

func TestDashboard(t *testing.T) {
	d, raw := loadDashboard(t)
	if d.UID != "hostlease" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	type cell struct{ x, y int }
	used := map[cell]string{}
	ids := map[int]bool{}
	n := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := used[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap", p.Title, other)
				}
				used[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		n++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the $datasource variable", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q: empty target", p.Title)
			}
		}
	}
	if n < 6 {
		t.Errorf("only %d panels", n)
	}
	// What the dashboard must show.
	all := string(raw)
	for what, needle := range map[string]string{
		"pool usage per node/network": "hostlease_pool_free_addresses",
		"allocations by state":        "sum by (state) (hostlease_allocations",
		"leak candidates":             "hostlease_leak_candidates",
		"reclaims by reason":          "sum by (reason) (increase(hostlease_reclaims_total",
		"sweep duration quantiles":    "histogram_quantile(0.99, sum by (le) (rate(hostlease_sweep_duration_seconds_bucket",
		"CRI up":                      "hostlease_cri_up",
	} {
		if !strings.Contains(all, needle) {
			t.Errorf("dashboard lacks %s (%s)", what, needle)
		}
	}

	// The example overlay ships it verbatim as a ConfigMap for Grafana's
	// sidecar.
	cm := find[*corev1.ConfigMap](t, build(t, "overlays/example"), "ConfigMap", "hostlease-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	if cm.Data["hostlease.json"] != string(raw) {
		t.Errorf("dashboard ConfigMap data differs from %s", dashboardFile)
	}
}

func TestMetricNamesExist(t *testing.T) {
	exported := exportedNames(t)
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			if n == "up" {
				continue
			}
			if !exported[n] {
				t.Errorf("%s: metric %s is not exported by hostlease-gc (expr %q)", where, n, expr)
			}
		}
	}
	for _, r := range loadRules(t) {
		check("rule "+r.Alert+r.Record, r.Expr)
	}
	d, _ := loadDashboard(t)
	queries := dashboardQueries(t, d)
	for where, expr := range queries {
		check("dashboard "+where, expr)
	}

	// And the dashboard's queries are valid PromQL: promtool checks them as
	// recording rules.
	var b strings.Builder
	b.WriteString("groups:\n- name: dashboard\n  rules:\n")
	keys := make([]string, 0, len(queries))
	for k := range queries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		e, _ := json.Marshal(queries[k])
		fmt.Fprintf(&b, "  - record: dashboard:query%d\n    expr: %s\n", i, e)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", f)
}

// ---------------------------------------------------------------------------
// Example CNI configurations

func checkConflist(t *testing.T, where string, raw []byte) {
	t.Helper()
	cl, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if len(cl.Plugins) < 2 {
		t.Errorf("%s: %d plugins, want a chain ending with the commit marker", where, len(cl.Plugins))
		return
	}
	var ipamIdx []int
	for i, p := range cl.Plugins {
		if p.Network.IPAM.Type == "hostlease" {
			ipamIdx = append(ipamIdx, i)
		}
	}
	if len(ipamIdx) != 1 || ipamIdx[0] == len(cl.Plugins)-1 {
		t.Errorf("%s: want exactly one plugin (not the last) with ipam type hostlease, got indexes %v", where, ipamIdx)
		return
	}
	var ipam struct {
		IPAM struct {
			Type    string `json:"type"`
			DataDir string `json:"dataDir"`
			Ranges  [][]struct {
				Subnet     string `json:"subnet"`
				RangeStart string `json:"rangeStart"`
				RangeEnd   string `json:"rangeEnd"`
				Gateway    string `json:"gateway"`
			} `json:"ranges"`
			LockTimeout            *string `json:"lockTimeout"`
			FailStatusOnExhaustion *bool   `json:"failStatusOnExhaustion"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(cl.Plugins[ipamIdx[0]].Bytes, &ipam); err != nil {
		t.Errorf("%s: ipam section: %v", where, err)
		return
	}
	if len(ipam.IPAM.Ranges) == 0 {
		t.Errorf("%s: no ranges", where)
	}
	for i, rs := range ipam.IPAM.Ranges {
		for _, r := range rs {
			_, subnet, err := net.ParseCIDR(r.Subnet)
			if err != nil {
				t.Errorf("%s: range set %d: %v", where, i, err)
				continue
			}
			for _, ip := range []string{r.RangeStart, r.RangeEnd, r.Gateway} {
				if ip != "" && !subnet.Contains(net.ParseIP(ip)) {
					t.Errorf("%s: range set %d: %s outside %s", where, i, ip, r.Subnet)
				}
			}
		}
	}
	last := cl.Plugins[len(cl.Plugins)-1]
	var marker map[string]any
	if err := json.Unmarshal(last.Bytes, &marker); err != nil {
		t.Fatal(err)
	}
	if marker["type"] != "hostlease" {
		t.Errorf("%s: last plugin is %v, want the hostlease commit marker", where, marker["type"])
	}
	if _, ok := marker["ipam"]; ok {
		t.Errorf("%s: the commit marker must have no ipam key", where)
	}
	// The marker must find the same stores as the ipam section
	// (docs/contracts.md): both default to gc.DefaultDataDir.
	orDefault := func(d string) string {
		if d == "" {
			return gc.DefaultDataDir
		}
		return filepath.Clean(d)
	}
	if dd, _ := marker["dataDir"].(string); orDefault(dd) != orDefault(ipam.IPAM.DataDir) {
		t.Errorf("%s: commit marker dataDir %q != ipam dataDir %q", where, dd, ipam.IPAM.DataDir)
	}
}

func TestExampleConflists(t *testing.T) {
	files, err := filepath.Glob("examples/*.conflist")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	dual := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkConflist(t, f, b)
		if strings.Contains(f, "dualstack") {
			dual = true
			var c struct {
				Plugins []struct {
					IPAM struct {
						Ranges [][]struct{ Subnet string } `json:"ranges"`
					} `json:"ipam"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			rs := c.Plugins[0].IPAM.Ranges
			if len(rs) != 2 || strings.Contains(rs[0][0].Subnet, ":") || !strings.Contains(rs[1][0].Subnet, ":") {
				t.Errorf("%s: want a v4 and a v6 range set, got %+v", f, rs)
			}
		}
	}
	if !dual {
		t.Error("no dual-stack example")
	}

	b, err := os.ReadFile("examples/multus-networkattachmentdefinition.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var nad struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &nad); err != nil {
		t.Fatal(err)
	}
	if nad.APIVersion != "k8s.cni.cncf.io/v1" || nad.Kind != "NetworkAttachmentDefinition" {
		t.Errorf("multus example is %s %s", nad.APIVersion, nad.Kind)
	}
	checkConflist(t, "multus NetworkAttachmentDefinition spec.config", []byte(nad.Spec.Config))
}
