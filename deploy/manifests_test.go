package deploy_test

// Tests of everything under deploy/: the kustomize base, components and
// overlays (built with krusty, decoded strictly), the DaemonSet's wiring to
// the daemon's real flag set, the Prometheus rules (promtool), the dashboard,
// the generated PrometheusRule, and the example CNI conflists; one file per
// subject: manifests (kustomize builds, strict decoding; the helpers every
// file uses), daemonset, rbac_scrape, rules, metricnames, conflists,
// daemon_metrics (the names against a running daemon).
//
// Regenerate deploy/components/monitoring/prometheusrule.yaml after editing
// deploy/prometheus/hostlease-rules.yaml:
//
//	HOSTLEASE_UPDATE=1 go test ./deploy -run TestPrometheusRuleInSync

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
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
