package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// RBAC and the metrics scrape wiring (Service, ServiceMonitor, the plain
// Prometheus example).

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
	// Exactly what pkg/daemon/kube.go uses (a node-filtered pod informer, Events
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
