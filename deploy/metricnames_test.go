package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/pool"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// Metric names: the rules and the dashboard use only what the daemon exports.

// exportedNames builds the daemon's collector with daemon.NewMetrics, gives it
// the report of a sweep over one network (one range set, one exhaustion) so
// that every metric has a sample, scrapes it over HTTP and returns the names
// a query may use (histograms with their _bucket/_sum/_count series).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := daemon.NewMetrics(reg)
	m.Observe(&daemon.SweepReport{Result: daemon.SweepOK, CRIReached: true, Networks: []*daemon.NetworkReport{{NetworkObservation: daemon.NetworkObservation{Network: "n",
		Snapshot: &daemon.Snapshot{RangeSets: make([]allocator.StoredRangeSet, 1),
			Usage:       []pool.Usage{{RangeSet: 0, Size: big.NewInt(4)}},
			Exhaustions: map[int]allocator.Exhaustion{0: {Count: 1, Last: time.Unix(1700000000, 0)}}}}}}}, time.Now())
	descs := make(chan *prometheus.Desc, 100)
	m.Describe(descs)
	close(descs)
	populated := len(descs)
	if populated == 0 {
		t.Fatal("daemon.Metrics describes no metric")
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
