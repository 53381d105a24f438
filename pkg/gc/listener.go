package gc

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTPLimits bound what clients of the daemon's HTTP listener (/metrics,
// /healthz, /readyz) can make it hold. The daemon runs with hostNetwork, so
// any pod on the node can connect: without bounds, idle keep-alive and
// slow-header connections each hold a goroutine, buffers and a file
// descriptor for as long as the client likes, until the memory limit kills
// the daemon and nothing is reclaimed.
type HTTPLimits struct {
	// MaxConns caps the connections held open. Reaching it never queues a
	// new connection (a kubelet probe must get through): one held connection
	// of the client address holding the most is closed to make room, the one
	// that has waited longest without a request being served (idle, or still
	// sending its header) first.
	MaxConns int
	// ReadHeaderTimeout closes a connection whose request header is not
	// complete in time (slow-header clients).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its header to the end of
	// its response (a client that does not read).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no new request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request header's size.
	MaxHeaderBytes int
}

// Defaults of the HTTP limits. The daemon's clients are the kubelet's two
// probes, one or two Prometheus servers and an operator's curl: a few
// connections, tiny headers, responses in milliseconds. A held connection
// costs about 20 KiB (goroutine, buffers), so DefaultHTTPMaxConns of them
// cost under 3 MiB.
const (
	DefaultHTTPMaxConns          = 128
	DefaultHTTPReadHeaderTimeout = 5 * time.Second
	DefaultHTTPReadTimeout       = 10 * time.Second
	DefaultHTTPWriteTimeout      = 30 * time.Second
	DefaultHTTPIdleTimeout       = 60 * time.Second
	DefaultHTTPMaxHeaderBytes    = 8 << 10
)

// Bounds of the HTTP limit flags.
const (
	MaxHTTPConns          = 1 << 16
	MaxHTTPTimeout        = 10 * time.Minute
	MinHTTPMaxHeaderBytes = 1 << 10
	MaxHTTPMaxHeaderBytes = 1 << 20
)

// metricsInFlight caps concurrent /metrics requests; more get 503 at once.
// Each gathers every series, so without it MaxConns scrapes at once would
// cost MaxConns times a scrape's memory.
const metricsInFlight = 4

// withDefaults returns l with each zero field set to its default.
func (l HTTPLimits) withDefaults() HTTPLimits {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultHTTPMaxConns
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultHTTPMaxHeaderBytes
	}
	def(&l.ReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultHTTPReadTimeout)
	def(&l.WriteTimeout, DefaultHTTPWriteTimeout)
	def(&l.IdleTimeout, DefaultHTTPIdleTimeout)
	return l
}

// newHTTPServer returns a server for h bounded by lim (zero fields: the
// defaults), and the listener wrapper that enforces lim.MaxConns with it.
// onShed is called for each connection closed to make room for a new one.
func newHTTPServer(h http.Handler, lim HTTPLimits, onShed func()) (*http.Server, func(net.Listener) net.Listener) {
	lim = lim.withDefaults()
	cc := &connCap{max: lim.MaxConns, onShed: onShed, conns: map[net.Conn]*heldConn{}}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         cc.track,
	}
	return srv, func(ln net.Listener) net.Listener { cc.Listener = ln; return cc }
}

// connCap is a listener that holds at most max connections of one
// http.Server (whose ConnState hook is track): for each accepted connection
// beyond max it closes one held connection, chosen by shedBefore, so a new
// connection is never queued behind a full listener.
//
// The choice is per client address first: the connection shed belongs to
// the address holding the most connections. A flood from one address (or a
// few) therefore only ever sheds its own connections, and a client with
// another address — the kubelet probing from the node's address, Prometheus
// from its pod — keeps its place however fast the flood connects. Within an
// address, a connection not being served (new: header not complete; idle:
// between requests) goes before one being served, the longest in its state
// first. States are ordered by a counter, not a clock.
type connCap struct {
	net.Listener
	max    int
	onShed func()

	mu    sync.Mutex
	seq   uint64
	conns map[net.Conn]*heldConn
}

type heldConn struct {
	src     string // the client's IP address
	state   http.ConnState
	since   uint64 // seq at its last state change
	closing bool   // closed to make room; gone at its StateClosed
}

// track is the server's ConnState hook. The server reports StateNew before
// it accepts the next connection, so Accept always sees every earlier one.
func (c *connCap) track(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st == http.StateClosed || st == http.StateHijacked {
		delete(c.conns, conn)
		return
	}
	h := c.conns[conn]
	if h == nil {
		h = &heldConn{src: clientIP(conn)}
		c.conns[conn] = h
	}
	c.seq++
	h.state, h.since = st, c.seq
}

func clientIP(conn net.Conn) string {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return conn.RemoteAddr().String()
}

// Accept accepts the next connection and, when max are already held, closes
// the one to shed (see connCap).
func (c *connCap) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err != nil {
		return nil, err
	}
	var victim net.Conn
	c.mu.Lock()
	perSrc := map[string]int{}
	held := 0
	for _, h := range c.conns {
		if !h.closing {
			perSrc[h.src]++
			held++
		}
	}
	if held >= c.max {
		var v *heldConn
		for k, h := range c.conns {
			if !h.closing && (v == nil || shedBefore(h, v, perSrc)) {
				victim, v = k, h
			}
		}
		if v != nil {
			v.closing = true
		}
	}
	c.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
		if c.onShed != nil {
			c.onShed()
		}
	}
	return conn, nil
}

// shedBefore orders held connections to shed: the one whose address holds
// more connections first, then one not being served before one that is,
// then the one longest in its state.
func shedBefore(a, b *heldConn, perSrc map[string]int) bool {
	if na, nb := perSrc[a.src], perSrc[b.src]; na != nb {
		return na > nb
	}
	aw, bw := a.state != http.StateActive, b.state != http.StateActive
	if aw != bw {
		return aw
	}
	return a.since < b.since
}
