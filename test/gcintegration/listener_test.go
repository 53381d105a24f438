package gcintegration

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gcdaemon "github.com/hostlease/hostlease/pkg/daemon"
)

// The daemon serves /metrics, /healthz and /readyz with hostNetwork: any pod
// on the node can connect. A flood of idle keep-alive connections and of
// clients trickling their header must cost it bounded memory and file
// descriptors, must not stop its sweeps or keep the kubelet's liveness probe
// out, and everything must be released when the flood ends.
const (
	floodClients = 4000 // a quarter slow-header, the rest idle keep-alive
	// floodFdReserve is what the test process keeps of its descriptor limit
	// for everything but the flood.
	floodFdReserve = 512
	// floodRedial is how long a flood client whose connection the daemon
	// closed waits before it connects again: thousands of connections keep
	// trying for the whole flood, each client at a bounded rate.
	floodRedial = time.Second
	// floodProbes is how many liveness probes are made during the flood.
	floodProbes = 12

	// Bounds. The daemon holds at most DefaultHTTPMaxConns connections;
	// floodFdSlack covers connections being closed while a new one is
	// accepted (a closed socket's descriptor is released when its reader
	// wakes up). floodRSSGrowth bounds the peak RSS (VmHWM) over the flood
	// against the RSS before it: held connections plus the garbage of the
	// ones shed, before the collector runs.
	floodFdSlack   = 64
	floodRSSGrowth = 32 << 20
)

func TestListenerHoldsUnderFlood(t *testing.T) {
	n := newNode(t, 8)
	d := n.startDaemon()
	pid := d.Cmd.Process.Pid
	// Steady state first: a few sweeps done, the metrics scraped once.
	eventually(t, "2 sweeps", func() (bool, string) {
		v := d.scrape().sweeps()
		return v >= 2, fmt.Sprintf("sweeps %v", v)
	})
	before := readProc(t, pid)
	t.Logf("before the flood: RSS %d KiB (peak %d KiB), %d fds", before.rss>>10, before.hwm>>10, before.fds)

	idle, slow := floodSize(t)
	fds := &fdWatch{pid: pid}
	fds.start()
	f := startFlood(d.Addr, idle, slow)
	stopped := false
	stopFlood := func() {
		if !stopped {
			stopped = true
			f.stop()
		}
	}
	defer stopFlood()

	// The flood is in place: every client has connected at least once and
	// has been answered or shed.
	eventually(t, "every flood client connected", func() (bool, string) {
		c := f.connected.Load()
		return c >= int64(idle+slow), fmt.Sprintf("%d of %d flood clients connected", c, idle+slow)
	})

	// A leak made during the flood is reclaimed: sweeps go on.
	leakIP := n.add("leak-flood")
	eventually(t, "the leak made during the flood reclaimed", func() (bool, string) {
		recs := n.records()
		_, held := recs["leak-flood"]
		return !held, fmt.Sprintf("%s still held (%d records)", leakIP, len(recs))
	})

	// The kubelet's liveness probe gets through, every time: a fresh
	// connection from another address than the flood's (the kubelet probes
	// from the node's address, a flooding pod has its own), one GET. So
	// does a Prometheus scrape.
	probeOK := 0
	for i := range floodProbes {
		if code, err := probe(probeSrc, d.Addr, "/healthz"); err != nil || code != http.StatusOK {
			t.Errorf("/healthz probe %d during the flood: %d %v", i, code, err)
		} else {
			probeOK++
		}
		time.Sleep(100 * time.Millisecond) // spread over the flood, not a bound
	}
	if code, err := probe(scrapeSrc, d.Addr, "/metrics"); err != nil || code != http.StatusOK {
		t.Errorf("/metrics during the flood: %d %v", code, err)
	}
	d.alive()
	during := readProc(t, pid)
	stopFlood()
	peakFds := fds.stop()

	m := d.scrape()
	shed := m.sum("hostlease_http_connections_shed_total", nil)
	t.Logf("during the flood: %d connects (%d shed by the daemon: %v on its metric), /healthz %d/%d OK; peak RSS %d KiB (+%d KiB), peak fds %d (+%d)",
		f.connects.Load(), f.closedByServer.Load(), shed, probeOK, floodProbes, during.hwm>>10, (during.hwm-before.rss)>>10, peakFds, peakFds-before.fds)
	if limit := before.fds + gcdaemon.DefaultHTTPMaxConns + floodFdSlack; peakFds > limit {
		t.Errorf("the daemon held %d file descriptors during the flood, want at most %d (%d before, --http-max-connections %d, slack %d)",
			peakFds, limit, before.fds, gcdaemon.DefaultHTTPMaxConns, floodFdSlack)
	}
	if grew := during.hwm - before.rss; grew > floodRSSGrowth {
		t.Errorf("the daemon's peak RSS grew by %d KiB during the flood, want at most %d KiB", grew>>10, floodRSSGrowth>>10)
	}

	// After the flood everything is released.
	eventually(t, "the flood's connections released", func() (bool, string) {
		p := readProc(t, pid)
		return p.fds <= before.fds+2, fmt.Sprintf("%d fds (%d before the flood)", p.fds, before.fds)
	})
	if code, err := probe(probeSrc, d.Addr, "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz after the flood: %d %v", code, err)
	}
	d.stopClean()
}

// floodSize is the flood's idle and slow-header clients: floodClients, or
// fewer if the test process's descriptor limit, raised to its hard limit
// (for this process only), cannot hold them.
func floodSize(t *testing.T) (idle, slow int) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	n := floodClients
	if room := int(min(lim.Cur, 1<<20)) - floodFdReserve; room < n {
		n = room
	}
	if n < 4*gcdaemon.DefaultHTTPMaxConns {
		t.Skipf("descriptor limit %d leaves room for %d flood connections, under 4 x --http-max-connections", lim.Cur, n)
	}
	if n < floodClients {
		t.Logf("descriptor limit %d: flooding with %d connections instead of %d", lim.Cur, n, floodClients)
	}
	return n - n/4, n / 4
}

// Client addresses on loopback: the flood connects from 127.0.0.1, the
// kubelet's probe and Prometheus from others.
var (
	probeSrc  = net.ParseIP("127.0.0.2")
	scrapeSrc = net.ParseIP("127.0.0.3")
)

// probe makes one request from src on a fresh connection, as the kubelet
// does, and returns the status code. Its timeout is the hang guard.
func probe(src net.IP, addr, path string) (int, error) {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	c := http.Client{Timeout: hangGuard, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialer.DialContext}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// procStat is what /proc says of a process.
type procStat struct {
	rss, hwm int64 // VmRSS, VmHWM (peak RSS), bytes
	fds      int
}

func readProc(t *testing.T, pid int) procStat {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	var p procStat
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/status %s: %v", pid, line, err)
		}
		if k == "VmRSS" {
			p.rss = kib << 10
		} else {
			p.hwm = kib << 10
		}
	}
	if p.fds, err = countFds(pid); err != nil {
		t.Fatal(err)
	}
	return p
}

func countFds(pid int) (int, error) {
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	return len(ents), err
}

// fdWatch samples a process's descriptor count until stopped and keeps the
// largest.
type fdWatch struct {
	pid  int
	peak atomic.Int64
	done chan struct{}
	wg   sync.WaitGroup
}

func (w *fdWatch) start() {
	w.done = make(chan struct{})
	w.wg.Go(func() {
		for {
			if n, err := countFds(w.pid); err == nil && int64(n) > w.peak.Load() {
				w.peak.Store(int64(n))
			}
			select {
			case <-w.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

func (w *fdWatch) stop() int {
	close(w.done)
	w.wg.Wait()
	return int(w.peak.Load())
}

// flood runs idle keep-alive clients and slow-header clients against addr (loopback) until stop. Each keeps one connection
// open; when the daemon closes it, the client connects again after
// floodRedial.
type flood struct {
	addr           string
	done           chan struct{}
	wg             sync.WaitGroup
	connected      atomic.Int64 // clients that have connected at least once
	connects       atomic.Int64
	closedByServer atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startFlood(addr string, idle, slow int) *flood {
	f := &flood{addr: addr, done: make(chan struct{}), conns: map[net.Conn]bool{}}
	for i := range idle + slow {
		f.wg.Go(func() { f.client(i >= idle) })
	}
	return f
}

// stop closes every flood connection and waits for the clients to end.
func (f *flood) stop() {
	close(f.done)
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *flood) stopped() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *flood) client(slow bool) {
	first := true
	for !f.stopped() {
		c, err := net.DialTimeout("tcp", f.addr, hangGuard)
		if err == nil {
			f.mu.Lock()
			if f.stopped() {
				f.mu.Unlock()
				c.Close()
				return
			}
			f.conns[c] = true
			f.mu.Unlock()
			f.connects.Add(1)
			if first {
				first = false
				f.connected.Add(1)
			}
			if slow {
				f.trickle(c)
			} else {
				f.idle(c)
			}
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
			c.Close()
			if !f.stopped() {
				f.closedByServer.Add(1)
			}
		} else if first {
			first = false
			f.connected.Add(1) // refused: the attempt counts as made
		}
		select {
		case <-f.done:
		case <-time.After(floodRedial):
		}
	}
}

// idle sends one request, reads its response and then holds the connection
// until the daemon (or stop) closes it.
func (f *flood) idle(c net.Conn) {
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: flood\r\n\r\n")); err != nil {
		return
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return
	}
	resp.Body.Close()
	var b [1]byte
	_, _ = c.Read(b[:]) // blocks until the connection is closed
}

// trickle sends a request line, then a header one byte every 100ms, never
// ending it.
func (f *flood) trickle(c net.Conn) {
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Slow: ")); err != nil {
		return
	}
	for !f.stopped() {
		if _, err := c.Write([]byte("a")); err != nil {
			return
		}
		select {
		case <-f.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}
