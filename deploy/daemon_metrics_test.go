package deploy_test

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/gcproc"
	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricNamesInRunningDaemon checks the rules and the dashboard against the
// /metrics of a real hostlease-gc process (not just its registry in-process):
// a store made by real plugin ADDs (one of them failing for exhaustion), a
// daemon sweeping it with its runtime unreachable, and every hostlease_* name
// that a rule or panel uses must be in what it serves.
func TestMetricNamesInRunningDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bin := t.TempDir()
	if err := testbin.Build(bin, map[string]string{"hostlease": testbin.Plugin, "hostlease-gc": testbin.GC}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	conf := `{"cniVersion":"1.1.0","name":"metrics-net","type":"bridge","ipam":{"type":"hostlease","dataDir":"` + data +
		`","ranges":[[{"subnet":"10.123.0.0/30"}]]}}`
	for i, want := range []bool{true, false} { // a /30 holds one address: the second ADD exhausts it
		cmd := exec.Command(filepath.Join(bin, "hostlease"))
		cmd.Stdin = strings.NewReader(conf)
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c" + string(rune('0'+i)), "CNI_NETNS=/var/run/netns/none",
			"CNI_IFNAME=eth0", "CNI_PATH=" + bin}
		out, err := cmd.CombinedOutput()
		if (err == nil) != want {
			t.Fatalf("ADD %d: err=%v, want success=%v\n%s", i, err, want, out)
		}
	}

	daemon, err := gcproc.Start(filepath.Join(bin, "hostlease-gc"), []string{"run", "--no-api", "--data-dir", data,
		"--cri-endpoint", "unix://" + filepath.Join(data, "no-runtime.sock"), "--interval", "1h",
		"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemon.Stop() })

	used := map[string]string{}
	for _, r := range loadRules(t) {
		for _, n := range metricNames(r.Expr) {
			used[n] = "rule " + r.Alert + r.Record
		}
	}
	d, _ := loadDashboard(t)
	for where, expr := range dashboardQueries(t, d) {
		for _, n := range metricNames(expr) {
			used[n] = "dashboard " + where
		}
	}
	// The start sweep fails to reach the runtime but still exports the
	// network's series; it logs "sweep finished" after its metrics are
	// exported (with --interval 1h no other sweep runs), so the scrape after
	// that line serves every series it exports.
	if err := daemon.Wait("the start sweep", func() bool { return len(daemon.Entries("sweep finished")) > 0 }); err != nil {
		t.Fatal(err)
	}
	families := scrapeNames(t, "http://"+daemon.Addr+"/metrics")
	for n, where := range used {
		if n != "up" && !families[n] {
			t.Errorf("%s uses %s, which the running hostlease-gc does not serve", where, n)
		}
	}
}

// scrapeNames returns the metric names one GET of url serves, histograms with
// their _bucket/_sum/_count series.
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	names := map[string]bool{}
	for name, mf := range mfs {
		names[name] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}
