package daemon

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// metricsPerClient caps the /metrics requests one client address has in
// flight; more from it get 503 at once. Prometheus has one per target;
// a second covers an HA pair behind one address.
const metricsPerClient = 2

// metricsMaxAge is how old a rendering of the metrics served to a scrape may
// be: scrapes within it share one gathering. A finished sweep discards the
// rendering (scrapeCache.invalidate), so a scrape always has the last
// sweep's series; the Go and process collectors are read at most this long
// before the scrape. Prometheus scrapes a target at most once per its scrape
// interval (at least 1 s in practice), so one Prometheus never gets its own
// previous rendering.
const metricsMaxAge = time.Second

// scrapeHandler serves /metrics from a rendering shared by concurrent
// scrapes (scrapeCache) in the text format. A response being written costs
// its connection only (the rendering is shared and immutable): a client
// that reads slowly holds its own connection, never what another client
// needs. Each client address has at most metricsPerClient in flight.
type scrapeHandler struct {
	cache *scrapeCache

	mu       sync.Mutex
	inFlight map[string]int
}

func newScrapeHandler(g prometheus.Gatherer) *scrapeHandler {
	return &scrapeHandler{cache: &scrapeCache{g: g, maxAge: metricsMaxAge, now: time.Now}, inFlight: map[string]int{}}
}

func (h *scrapeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	src := remoteIP(r.RemoteAddr)
	if !h.enter(src) {
		http.Error(w, fmt.Sprintf("%d /metrics requests from %s already in flight, try again later", metricsPerClient, src), http.StatusServiceUnavailable)
		return
	}
	defer h.leave(src)
	rend := h.cache.get()
	if rend.err != nil {
		http.Error(w, "error gathering metrics: "+rend.err.Error(), http.StatusInternalServerError)
		return
	}
	body := rend.text
	hdr := w.Header()
	hdr.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	hdr.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		body = rend.gzip
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Set("Content-Length", fmt.Sprint(len(body)))
	_, _ = w.Write(body)
}

func (h *scrapeHandler) enter(src string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inFlight[src] >= metricsPerClient {
		return false
	}
	h.inFlight[src]++
	return true
}

func (h *scrapeHandler) leave(src string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inFlight[src]--; h.inFlight[src] <= 0 {
		delete(h.inFlight, src)
	}
}

func remoteIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// scrapeCache renders the gatherer's metrics once for every scrape that
// arrives while a rendering is in progress or within maxAge of its start:
// one gathering at a time, whatever the number of scrapers.
type scrapeCache struct {
	g      prometheus.Gatherer
	maxAge time.Duration
	now    func() time.Time

	mu       sync.Mutex
	gen      uint64     // bumped by invalidate
	last     *rendering // the latest finished
	inflight *rendering // in progress, or nil
}

// rendering is one gathering of every series, encoded; immutable once done
// is closed.
type rendering struct {
	gen  uint64    // the cache's generation when its gathering started
	at   time.Time // when its gathering started
	done chan struct{}
	text []byte
	gzip []byte
	err  error
}

func (c *scrapeCache) get() *rendering {
	c.mu.Lock()
	if r := c.inflight; r != nil && r.gen == c.gen {
		c.mu.Unlock()
		<-r.done
		return r
	}
	if r := c.last; r != nil && r.gen == c.gen && r.err == nil && c.now().Sub(r.at) < c.maxAge {
		c.mu.Unlock()
		return r
	}
	r := &rendering{gen: c.gen, at: c.now(), done: make(chan struct{})}
	c.inflight = r
	c.mu.Unlock()
	r.text, r.gzip, r.err = render(c.g)
	c.mu.Lock()
	if c.inflight == r {
		c.inflight = nil
	}
	if c.last == nil || c.last.gen <= r.gen {
		c.last = r
	}
	c.mu.Unlock()
	close(r.done)
	return r
}

// invalidate discards the renderings made so far: the next scrape gathers
// anew (a sweep has changed the series).
func (c *scrapeCache) invalidate() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}

// render gathers g and encodes it in the text format, plain and gzipped.
func render(g prometheus.Gatherer) (text, gz []byte, err error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, nil, err
		}
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return nil, nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), zb.Bytes(), nil
}
