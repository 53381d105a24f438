package daemon

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// DefaultNetnsDebounce gathers the removals of one teardown burst into one
// sweep; with the kick poll it keeps a proven leak's return to the pool
// within about a second.
const DefaultNetnsDebounce = 100 * time.Millisecond

// Daemon runs sweeps on a timer, at once when a plugin records an exhaustion
// or a netns under --netns-dir disappears, and serves /metrics, /healthz and
// /readyz.
type Daemon struct {
	Sweeper  *Sweeper
	Registry *prometheus.Registry
	// kickPoll is how often the kick file's mtime is checked (and a missing
	// --netns-dir looked for again).
	kickPoll time.Duration
	// netnsDebounce is how long a removed netns waits for others of the same
	// burst before it wakes a sweep (0: DefaultNetnsDebounce).
	netnsDebounce time.Duration
	// kickPolled, when set, is called after each look at the kick file
	// (tests wait on it instead of sleeping).
	kickPolled func()

	// httpShed counts connections the listener closed to stay within
	// --http-max-connections.
	httpShed prometheus.Counter
	// scrapes serves /metrics (made by Handler); a finished sweep discards
	// its rendering.
	scrapes atomic.Pointer[scrapeHandler]

	lastSweep atomic.Int64 // unix nanos of the last finished sweep
	ready     atomic.Bool  // a sweep has reached CRI
	// dataDir is the last sweep's DataDirStatus (nil before the first).
	dataDir atomic.Pointer[DataDirStatus]
}

// NewDaemon wires a daemon from options: CRI client, optional API client,
// metrics registry.
func NewDaemon(o *Options, log *slog.Logger) (*Daemon, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cri, err := DialCRI(o.CRIEndpoint)
	if err != nil {
		return nil, err
	}
	kube, err := KubeFromOptions(o)
	if err != nil {
		cri.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	shed := prometheus.NewCounter(prometheus.CounterOpts{Name: "hostlease_http_connections_shed_total",
		Help: "Connections of the metrics listener closed to make room for a new one (--http-max-connections was reached)."})
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), shed)
	return &Daemon{
		Sweeper:  &Sweeper{Opts: o, CRI: cri, Kube: kube, Metrics: NewMetrics(reg), Log: log},
		Registry: reg,
		kickPoll: time.Second,
		httpShed: shed,
	}, nil
}

// Run sweeps until ctx ends. Each sweep is independent: a failed one is logged
// and counted, and the next one runs on schedule.
func (d *Daemon) Run(ctx context.Context) error {
	o := d.Sweeper.Opts
	if o.MetricsAddr != "" {
		ln, err := net.Listen("tcp", o.MetricsAddr)
		if err != nil {
			return err
		}
		onShed := func() {}
		if d.httpShed != nil {
			onShed = d.httpShed.Inc
		}
		srv, limit := newHTTPServer(d.Handler(), o.HTTP, onShed)
		go func() { _ = srv.Serve(limit(ln)) }()
		defer srv.Close()
		d.Sweeper.Log.Info("serving metrics", "addr", ln.Addr().String())
	}
	if o.ProbeSocket != "" {
		ln, err := listenProbeSocket(o.ProbeSocket)
		if err != nil {
			return err
		}
		srv := d.newProbeServer()
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		d.Sweeper.Log.Info("serving probes", "socket", o.ProbeSocket)
	}
	d.Sweeper.Log.Info("hostlease-gc started", "version", Version, "dataDir", o.DataDir, "cri", o.CRIEndpoint,
		"interval", o.Interval, "misses", o.Misses, "grace", o.Grace, "minAge", o.MinAge, "dryRun", o.DryRun, "api", d.Sweeper.Kube != nil)
	ticker := time.NewTicker(o.Interval)
	defer ticker.Stop()
	kickTick := time.NewTicker(d.kickPoll)
	defer kickTick.Stop()
	kickPath := filepath.Join(o.DataDir, ".kick")
	lastKick := modTime(kickPath)
	debounce := d.netnsDebounce
	if debounce <= 0 {
		debounce = DefaultNetnsDebounce
	}
	// Watching starts before the first sweep: a netns removed during it
	// wakes the next one.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	netnsGone := WatchNetnsDir(wctx, o.NetnsDir, debounce, d.kickPoll, d.Sweeper.Log)
	d.sweep(ctx, "start")
	for {
		select {
		case <-ctx.Done():
			d.Sweeper.CRI.Close()
			d.Sweeper.Log.Info("hostlease-gc stopped", "reason", context.Cause(ctx).Error())
			return nil
		case <-ticker.C:
			d.sweep(ctx, "interval")
		case <-kickTick.C:
			if m := modTime(kickPath); m.After(lastKick) {
				lastKick = m
				d.sweep(ctx, "exhaustion")
			}
			if d.kickPolled != nil {
				d.kickPolled()
			}
		case <-netnsGone:
			d.sweep(ctx, "netns_removed")
		}
	}
}

func (d *Daemon) sweep(ctx context.Context, why string) {
	rep := d.Sweeper.Sweep(ctx)
	if h := d.scrapes.Load(); h != nil {
		h.cache.invalidate()
	}
	d.lastSweep.Store(time.Now().UnixNano())
	if rep.CRI.Complete {
		d.ready.Store(true)
	}
	d.noteDataDir(ctx, rep.DataDir)
	reclaimed := 0
	for _, nr := range rep.Networks {
		reclaimed += len(nr.Reclaimed)
	}
	level := slog.LevelDebug
	if why != "interval" {
		level = slog.LevelInfo // woken sweeps are rare and worth a line
	}
	d.Sweeper.Log.Log(ctx, level, "sweep finished", "trigger", why, "result", rep.Result, "networks", len(rep.Networks),
		"reclaimed", reclaimed, "duration", rep.Duration)
}

// noteDataDir keeps a sweep's view of --data-dir for /readyz and logs it
// when it changes: a warning when the directory is missing, a line when it
// is empty, one when it holds stores again.
func (d *Daemon) noteDataDir(ctx context.Context, st DataDirStatus) {
	prev := d.dataDir.Swap(&st)
	switch {
	case prev != nil && *prev == st:
	case st.Missing:
		d.Sweeper.Log.WarnContext(ctx, "data dir missing", "why", st.Why)
	case !st.OK:
		d.Sweeper.Log.InfoContext(ctx, "data dir empty", "why", st.Why)
	case prev != nil:
		d.Sweeper.Log.InfoContext(ctx, "data dir holds stores", "dataDir", d.Sweeper.Opts.DataDir)
	}
}

// Handler serves /metrics (scrapeHandler: one rendering shared by the
// scrapes of a second, at most metricsPerClient in flight per client
// address, 503 beyond); /healthz and /readyz share nothing with it (no
// slot, no lock: a probe never waits behind a scrape). /healthz fails when
// no sweep finished for three intervals (a wedged loop); /readyz succeeds
// once a sweep reached CRI, unless the last sweep found no --data-dir (its
// body says why; an empty data dir is ready, and says so).
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	sh := newScrapeHandler(d.Registry)
	d.scrapes.Store(sh)
	mux.Handle("/metrics", sh)
	d.handleProbes(mux)
	return mux
}

// handleProbes registers /healthz and /readyz on mux (the TCP listener's and
// the probe socket's).
func (d *Daemon) handleProbes(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		last := time.Unix(0, d.lastSweep.Load())
		if d.lastSweep.Load() != 0 && time.Since(last) > 3*d.Sweeper.Opts.Interval+2*criTimeout {
			http.Error(w, "no sweep finished since "+last.Format(time.RFC3339), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		dd := d.dataDir.Load()
		switch {
		case !d.ready.Load():
			http.Error(w, "no sweep has reached CRI yet", http.StatusServiceUnavailable)
		case dd != nil && dd.Unusable:
			http.Error(w, dd.Why, http.StatusServiceUnavailable)
		case dd != nil && !dd.OK:
			_, _ = w.Write([]byte("ok: " + dd.Why + "\n"))
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
}

// modTime is the file's mtime, or the zero time when it cannot be read. A
// symlink's own mtime: nothing is followed.
func modTime(path string) time.Time {
	fi, err := os.Lstat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
