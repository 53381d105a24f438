package daemon

import (
	"context"
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
	// of the client address holding the most is closed to make room (see
	// shedBefore for which).
	MaxConns int
	// MaxConnsPerClient caps the connections one client address holds
	// (at most MaxConns): a new connection from an address at its cap
	// closes one of that address's own, so a flood from one address never
	// holds more than this share of the listener.
	MaxConnsPerClient int
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
	DefaultHTTPMaxConnsPerClient = 32
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
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = DefaultHTTPMaxConnsPerClient
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
// defaults), and the listener wrapper that enforces lim.MaxConns and
// lim.MaxConnsPerClient with it. onShed is called for each connection
// closed to make room for a new one.
func newHTTPServer(h http.Handler, lim HTTPLimits, onShed func()) (*http.Server, func(net.Listener) net.Listener) {
	lim = lim.withDefaults()
	cc := &connCap{max: lim.MaxConns, perClient: min(lim.MaxConnsPerClient, lim.MaxConns), onShed: onShed, conns: map[net.Conn]*trackedConn{}}
	srv := &http.Server{
		Handler:           headerLimit(cc.markProbes(h)),
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         cc.track,
	}
	return srv, func(ln net.Listener) net.Listener { cc.Listener = ln; return cc }
}

// headerLimit answers 431 to a request whose header (request line
// included, as sent but for optional whitespace) is larger than its
// server's MaxHeaderBytes, as net/http's default when that is unset.
// net/http stops reading a header at MaxHeaderBytes plus 4 KiB of buffer
// slop; this makes the limit exact.
func headerLimit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := http.DefaultMaxHeaderBytes
		if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.MaxHeaderBytes > 0 {
			limit = srv.MaxHeaderBytes
		}
		if headerSize(r) > limit {
			w.Header().Set("Connection", "close")
			http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headerSize is r's header as sent: request line, Host, every field, and
// the blank line.
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// connCap is a listener that holds at most max connections of one
// http.Server (whose ConnState hook is track), and at most perClient of
// one client address: for each accepted connection beyond either it
// closes one held connection, chosen by shedBefore, so a new connection is
// never queued behind a full listener. Accept does no I/O on a client's
// connection but closing the one shed, and closing never waits on the
// peer (it is reset: its unsent data is dropped).
//
// The choice is per client address first: the connection shed belongs to
// the new connection's address when that address is at perClient, else to
// the address holding the most connections (of those it may shed). A
// flood from one address (or
// a few) therefore only ever sheds its own connections, and a client with
// another address — the kubelet probing from the node's address,
// Prometheus from its pod — keeps its place however fast the flood
// connects. Within an address, connections are shed idle first, then
// those being served, and those still waiting for their request header
// last, the longest in its state first: a probe's connection (a fresh
// connection whose header follows at once and whose answer is immediate)
// is the last its address gives up, so a flood from the kubelet's own
// address (a hostNetwork pod) sheds its own connections that hold a
// response or sit idle before the probe's. A connection serving a probe
// (/healthz, /readyz: answered at once, from memory) is never shed; when
// only such connections could be, the new connection is closed instead.
// States are ordered by a counter, not a clock.
type connCap struct {
	net.Listener
	max       int
	perClient int
	onShed    func()

	mu    sync.Mutex
	seq   uint64
	conns map[net.Conn]*trackedConn
}

// trackedConn is one connection connCap counts, from its StateNew until its
// StateClosed (or StateHijacked).
type trackedConn struct {
	src     string // the client's IP address
	state   http.ConnState
	since   uint64 // seq at its last state change
	probe   bool   // serving a probe path (set by the handler, cleared at its next state)
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
		h = &trackedConn{src: clientIP(conn)}
		c.conns[conn] = h
	}
	c.seq++
	h.state, h.since, h.probe = st, c.seq, false
}

// probePaths are the kubelet's probes: answered at once from memory.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true}

// markProbes marks the connection of each request for a probe path as
// serving a probe (see connCap) before h serves it.
func (c *connCap) markProbes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, ok := r.Context().Value(connKey{}).(net.Conn); ok && probePaths[r.URL.Path] {
			c.mu.Lock()
			if hc := c.conns[conn]; hc != nil && hc.state == http.StateActive {
				hc.probe = true
			}
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// connKey is the request context key of its connection (http.Server's
// ConnContext).
type connKey struct{}

func clientIP(conn net.Conn) string {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return conn.RemoteAddr().String()
}

// Accept accepts the next connection and, when max are already held, or
// perClient of its address, closes the one to shed (see connCap).
func (c *connCap) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err != nil {
		return nil, err
	}
	victim := c.choose(conn)
	if victim != nil {
		if tc, ok := victim.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = victim.Close()
		if c.onShed != nil {
			c.onShed()
		}
	}
	return conn, nil
}

// choose marks and returns the held connection to shed for conn, conn
// itself when every candidate serves a probe, or nil when there is room.
func (c *connCap) choose(conn net.Conn) net.Conn {
	src := clientIP(conn)
	c.mu.Lock()
	defer c.mu.Unlock()
	perSrc := map[string]int{}
	open := 0
	for _, h := range c.conns {
		if !h.closing {
			perSrc[h.src]++
			open++
		}
	}
	only := ""
	switch {
	case perSrc[src] >= c.perClient:
		only = src
	case open < c.max:
		return nil
	}
	var victim net.Conn
	var v *trackedConn
	for k, h := range c.conns {
		if h.closing || h.probe || (only != "" && h.src != only) {
			continue
		}
		if v == nil || shedBefore(h, v, perSrc) {
			victim, v = k, h
		}
	}
	if v == nil {
		return conn // every candidate serves a probe
	}
	v.closing = true
	return victim
}

// shedRank orders connections within an address: idle first, then being
// served, then waiting for the request header (as a probe does at first).
// One serving a probe is not a candidate (choose).
func shedRank(h *trackedConn) int {
	switch {
	case h.state == http.StateIdle:
		return 0
	case h.state == http.StateActive:
		return 1
	default:
		return 2
	}
}

// shedBefore orders held connections to shed: the one whose address holds
// more connections first, then by state (shedRank), then the one longest
// in its state.
func shedBefore(a, b *trackedConn, perSrc map[string]int) bool {
	if na, nb := perSrc[a.src], perSrc[b.src]; na != nb {
		return na > nb
	}
	if ra, rb := shedRank(a), shedRank(b); ra != rb {
		return ra < rb
	}
	return a.since < b.since
}
