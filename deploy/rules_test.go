package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// The Prometheus rules: annotations and runbook anchors, the generated
// PrometheusRule kept in sync, promtool checks and rule unit tests.

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
