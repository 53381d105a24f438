package daemon

import (
	"flag"
	"fmt"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"math"
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
	// ProbeSocket is a unix socket serving /healthz and /readyz to exec
	// probes (probe.go); empty: none.
	ProbeSocket string
	// HTTP bounds the listener at MetricsAddr. Validate refuses zero
	// fields (net/http reads a zero timeout as none).
	HTTP       HTTPLimits
	NodeName   string
	Kubeconfig string
	NoAPI      bool
	LogFormat  string
	// LogLevel is the least severe level logged: debug, info (also when
	// empty), warn, error.
	LogLevel string
	NetnsDir string
	// ProcDir is where the kernel's /proc is visible; the node's boot time
	// is read from its stat file (btime).
	ProcDir string
}

// Default values. MinAge exceeds kubelet's 4 minute RunPodSandbox timeout so an
// ADD still in flight (invisible in CRI until it finishes) is never reclaimed.
const (
	DefaultCRIEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultDataDir     = "/var/lib/cni/hostlease"
	DefaultMetricsAddr = ":9734"
	DefaultNetnsDir    = "/var/run/netns"
	DefaultProcDir     = "/proc"
)

// Bounds of the flags: values outside are a mistake, not a setting.
const (
	MinInterval = time.Second
	MaxInterval = time.Hour
	MaxMisses   = 1000
	// MaxWait bounds --grace, --min-age and --netns-grace: a leak held for
	// longer than a day is a full pool, not caution.
	MaxWait = 24 * time.Hour
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
	fs.DurationVar(&o.NetnsGrace, "netns-grace", 0, "absence needed when the allocation carries proof of death (its netns is gone, or it predates the node's boot); replaces --misses, --grace and --min-age then; 0 reclaims at once")
	fs.Float64Var(&o.MaxReclaimFraction, "max-reclaim-fraction", reclaim.DefaultMaxFraction, "refuse a sweep that would reclaim, without proof of death, more than this fraction of the records a network holds (0 < f <= 1; at least one record is always allowed)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report what would be reclaimed and change nothing")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "address serving /metrics, /healthz and /readyz (empty disables)")
	fs.StringVar(&o.ProbeSocket, "probe-socket", "", "unix socket serving /healthz and /readyz to exec probes (hostlease-gc probe), where no other client competes with the kubelet; its directory must be owned by this user or root and not group/other-writable (created 0700 when missing); a socket of an earlier run nothing answers on is replaced, anything else refused (empty disables)")
	fs.IntVar(&o.HTTP.MaxConns, "http-max-connections", DefaultHTTPMaxConns, "connections the metrics listener holds at most; beyond, one of the client address holding the most is closed to make room (idle first, then one being served, one still sending its header last)")
	fs.IntVar(&o.HTTP.MaxConnsPerClient, "http-max-connections-per-client", DefaultHTTPMaxConnsPerClient, "connections one client address holds at most on the metrics listener (at most --http-max-connections); beyond, one of its own is closed to make room")
	fs.DurationVar(&o.HTTP.ReadHeaderTimeout, "http-read-header-timeout", DefaultHTTPReadHeaderTimeout, "close a metrics-listener connection whose request header is not complete in this time")
	fs.DurationVar(&o.HTTP.ReadTimeout, "http-read-timeout", DefaultHTTPReadTimeout, "time to read a whole request on the metrics listener")
	fs.DurationVar(&o.HTTP.WriteTimeout, "http-write-timeout", DefaultHTTPWriteTimeout, "time from a request's header to the end of its response on the metrics listener")
	fs.DurationVar(&o.HTTP.IdleTimeout, "http-idle-timeout", DefaultHTTPIdleTimeout, "close a keep-alive connection of the metrics listener idle for this long")
	fs.IntVar(&o.HTTP.MaxHeaderBytes, "http-max-header-bytes", DefaultHTTPMaxHeaderBytes, "largest request header the metrics listener reads")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (downward API); needed for Kubernetes vetoes and Events")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig path; empty means in-cluster config")
	fs.BoolVar(&o.NoAPI, "no-api", false, "run without a Kubernetes API server (no vetoes, no Events)")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.LogLevel, "log-level", "info", "least severe level logged: debug, info, warn or error")
	fs.StringVar(&o.NetnsDir, "netns-dir", DefaultNetnsDir, "where the runtime keeps named network namespaces; watched, so a sweep runs when one disappears")
	fs.StringVar(&o.ProcDir, "proc-dir", DefaultProcDir, "where the kernel's /proc is mounted (the node's boot time is read from its stat file)")
	return o
}

// Validate reports the first flag with an unusable value, naming it.
func (o *Options) Validate() error {
	checkWait := func(name string, d time.Duration) error {
		if d < 0 || d > MaxWait {
			return fmt.Errorf("--%s must be between 0s and %s, got %s", name, MaxWait, d)
		}
		return nil
	}
	switch {
	case o.Interval < MinInterval || o.Interval > MaxInterval:
		return fmt.Errorf("--interval must be between %s and %s, got %s", MinInterval, MaxInterval, o.Interval)
	case o.Misses < 1 || o.Misses > MaxMisses:
		return fmt.Errorf("--misses must be between 1 and %d, got %d", MaxMisses, o.Misses)
	}
	if err := checkWait("grace", o.Grace); err != nil {
		return err
	}
	if err := checkWait("min-age", o.MinAge); err != nil {
		return err
	}
	if err := checkWait("netns-grace", o.NetnsGrace); err != nil {
		return err
	}
	if err := o.HTTP.validate(); err != nil {
		return err
	}
	f := o.MaxReclaimFraction
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f > 1:
		// NaN compares false with everything: it must be named, or it would
		// pass every range check and turn the guard off.
		return fmt.Errorf("--max-reclaim-fraction must be a number in (0, 1], got %g", f)
	case o.LogFormat != "text" && o.LogFormat != "json":
		return fmt.Errorf("--log-format must be text or json, got %q", o.LogFormat)
	case o.LogLevel != "" && !validLogLevel(o.LogLevel):
		return fmt.Errorf("--log-level must be debug, info, warn or error, got %q", o.LogLevel)
	case o.CRIEndpoint == "":
		return fmt.Errorf("--cri-endpoint must not be empty")
	case o.DataDir == "":
		return fmt.Errorf("--data-dir must not be empty")
	}
	return nil
}

// validate reports the first HTTP limit flag with an unusable value. A zero
// or negative timeout would mean "none" to net/http: not a limit.
func (l HTTPLimits) validate() error {
	if l.MaxConns < 1 || l.MaxConns > MaxHTTPConns {
		return fmt.Errorf("--http-max-connections must be between 1 and %d, got %d", MaxHTTPConns, l.MaxConns)
	}
	if l.MaxConnsPerClient < 1 || l.MaxConnsPerClient > MaxHTTPConns {
		return fmt.Errorf("--http-max-connections-per-client must be between 1 and %d, got %d", MaxHTTPConns, l.MaxConnsPerClient)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"http-read-header-timeout", l.ReadHeaderTimeout},
		{"http-read-timeout", l.ReadTimeout},
		{"http-write-timeout", l.WriteTimeout},
		{"http-idle-timeout", l.IdleTimeout},
	} {
		if t.d <= 0 || t.d > MaxHTTPTimeout {
			return fmt.Errorf("--%s must be more than 0s and at most %s, got %s", t.name, MaxHTTPTimeout, t.d)
		}
	}
	if l.MaxHeaderBytes < MinHTTPMaxHeaderBytes || l.MaxHeaderBytes > MaxHTTPMaxHeaderBytes {
		return fmt.Errorf("--http-max-header-bytes must be between %d and %d, got %d", MinHTTPMaxHeaderBytes, MaxHTTPMaxHeaderBytes, l.MaxHeaderBytes)
	}
	return nil
}

// PolicyFromOptions takes the policy thresholds from the daemon's flags.
func PolicyFromOptions(o *Options) reclaim.Policy {
	return reclaim.Policy{Misses: o.Misses, Grace: o.Grace, MinAge: o.MinAge, NetnsGrace: o.NetnsGrace, MaxReclaimFraction: o.MaxReclaimFraction}
}
