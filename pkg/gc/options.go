package gc

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// Options are the daemon's settings. Flag names are a contract: the DaemonSet in
// deploy/ and operators' tooling pass them, so they are registered in one place.
type Options struct {
	CRIEndpoint        string
	DataDir            string
	Interval           time.Duration
	Misses             int
	Grace              time.Duration
	MinAge             time.Duration
	NetnsGrace         time.Duration
	MaxReclaimFraction float64
	DryRun             bool
	MetricsAddr        string
	NodeName           string
	Kubeconfig         string
	NoAPI              bool
	LogFormat          string
	NetnsDir           string
}

// Default values. MinAge exceeds kubelet's 4 minute RunPodSandbox timeout so an
// ADD still in flight (invisible in CRI until it finishes) is never reclaimed.
const (
	DefaultCRIEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultDataDir     = "/var/lib/cni/hostlease"
	DefaultMetricsAddr = ":9734"
	DefaultNetnsDir    = "/var/run/netns"
)

// RegisterRunFlags registers the flags of `hostlease-gc run` on fs and returns
// the Options they fill in.
func RegisterRunFlags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.StringVar(&o.CRIEndpoint, "cri-endpoint", DefaultCRIEndpoint, "CRI runtime endpoint (unix socket)")
	fs.StringVar(&o.DataDir, "data-dir", DefaultDataDir, "directory holding the plugin's <network>.db stores")
	fs.DurationVar(&o.Interval, "interval", 30*time.Second, "time between sweeps")
	fs.IntVar(&o.Misses, "misses", 3, "consecutive sweeps a sandbox must be absent from CRI before its address is reclaimed")
	fs.DurationVar(&o.Grace, "grace", 2*time.Minute, "minimum time a sandbox must be absent from CRI before its address is reclaimed")
	fs.DurationVar(&o.MinAge, "min-age", 5*time.Minute, "minimum allocation age before reclaim; covers an ADD still in flight (kubelet waits up to 4m)")
	fs.DurationVar(&o.NetnsGrace, "netns-grace", 30*time.Second, "absence needed when the allocation's netns no longer exists (replaces --min-age and --grace then)")
	fs.Float64Var(&o.MaxReclaimFraction, "max-reclaim-fraction", 0.5, "refuse a sweep that would reclaim more than this fraction of a pool (0 < f <= 1)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report what would be reclaimed and change nothing")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "address serving /metrics, /healthz and /readyz (empty disables)")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (downward API); needed for Kubernetes vetoes and Events")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig path; empty means in-cluster config")
	fs.BoolVar(&o.NoAPI, "no-api", false, "run without a Kubernetes API server (no vetoes, no Events)")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.NetnsDir, "netns-dir", DefaultNetnsDir, "where the runtime keeps named network namespaces")
	return o
}

// Validate reports the first flag with an unusable value, naming it.
func (o *Options) Validate() error {
	switch {
	case o.Interval <= 0:
		return fmt.Errorf("--interval must be positive, got %s", o.Interval)
	case o.Misses < 1:
		return fmt.Errorf("--misses must be at least 1, got %d", o.Misses)
	case o.Grace < 0:
		return fmt.Errorf("--grace must not be negative, got %s", o.Grace)
	case o.MinAge < 0:
		return fmt.Errorf("--min-age must not be negative, got %s", o.MinAge)
	case o.NetnsGrace < 0:
		return fmt.Errorf("--netns-grace must not be negative, got %s", o.NetnsGrace)
	case o.MaxReclaimFraction <= 0 || o.MaxReclaimFraction > 1:
		return fmt.Errorf("--max-reclaim-fraction must be in (0, 1], got %g", o.MaxReclaimFraction)
	case o.LogFormat != "text" && o.LogFormat != "json":
		return fmt.Errorf("--log-format must be text or json, got %q", o.LogFormat)
	case o.CRIEndpoint == "":
		return fmt.Errorf("--cri-endpoint must not be empty")
	}
	return nil
}
