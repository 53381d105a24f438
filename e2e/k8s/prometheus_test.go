package k8s

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/e2e/harness"
)

const promAddr = "127.0.0.1:19090"

// startPrometheus runs the machine's Prometheus (Debian package
// `prometheus`) with deploy/prometheus's scrape job (its pod discovery
// replaced by the DaemonSet pod as a static target) and rules, evaluating
// every 5s.
// It is stopped by PID at the end of the test.
func startPrometheus(t testing.TB, c *Cluster) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not installed (apt-get install prometheus; hack/install-promtool.sh installs it): %v", err)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "prometheus.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	// What this environment forces: where the API server and the rules are,
	// and intervals short enough for a test.
	cfg["global"] = map[string]any{"scrape_interval": "5s", "evaluation_interval": "5s"}
	cfg["rule_files"] = []string{filepath.Join(root, "deploy", "prometheus", "hostlease-rules.yaml")}
	// Debian's prometheus is built without Kubernetes service discovery
	// ("field kubernetes_sd_configs not found"): the job's pod discovery and
	// relabeling become one static target, the DaemonSet pod's metrics port,
	// with the labels that relabeling gives it.
	for _, sc := range cfg["scrape_configs"].([]any) {
		job := sc.(map[string]any)
		delete(job, "kubernetes_sd_configs")
		delete(job, "relabel_configs")
		job["static_configs"] = []any{map[string]any{
			"targets": []string{fmt.Sprintf("%s:%d", NodeIP, MetricsPort)},
			"labels":  map[string]string{"node": NodeName, "namespace": SysNamespace, "pod": gcPod(t, c)},
		}}
	}
	out, _ := yaml.Marshal(cfg)
	dir := filepath.Join(Root, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cf, out, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(LogDir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	waitUntil(t, time.Minute, "Prometheus scraping the DaemonSet pod", func() (bool, string) {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					Health    string `json:"health"`
					ScrapeURL string `json:"scrapeUrl"`
					LastError string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := promGet("/api/v1/targets", &r); err != nil {
			return false, err.Error()
		}
		for _, tg := range r.Data.ActiveTargets {
			if tg.Health == "up" && tg.ScrapeURL == fmt.Sprintf("http://%s:%d/metrics", NodeIP, MetricsPort) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", r.Data.ActiveTargets)
	})
}

func promGet(path string, v any) error {
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + promAddr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// firingAlerts returns the names of the alerts Prometheus has firing.
func firingAlerts() ([]string, error) {
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := promGet("/api/v1/alerts", &r); err != nil {
		return nil, err
	}
	var out []string
	for _, a := range r.Data.Alerts {
		if a.State == "firing" {
			out = append(out, a.Labels["alertname"])
		}
	}
	sort.Strings(out)
	return out, nil
}
