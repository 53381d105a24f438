package gcintegration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The daemon's listener is shared by everyone on the node: the kubelet's
// probes (from the node's address), Prometheus (from its pod's) and any pod
// that connects. One client must not be able to starve the others.
const (
	// probeTimeout is the kubelet's probe timeout as the daemon's DaemonSet
	// sets it: a probe that gets no 200 within it is a failed probe. It is
	// the contract being tested, not a benchmark.
	probeTimeout = 5 * time.Second
	// fairProbes is how many probes and scrapes each test makes while the
	// flood runs.
	fairProbes = 10
	// hogConns is a flood of connections from one address that pipeline
	// /metrics and read slowly.
	hogConns = 200
	// hogPipeline is how many /metrics requests each hog sends at once:
	// far more responses than the socket buffers hold.
	hogPipeline = 4000
	// hogLife is how long a hog of the flood keeps a connection before it
	// makes a new one: the flood keeps connecting.
	hogLife = 50 * time.Millisecond
	// hogBacklog is what the daemon must have written to a slow scraper and
	// not had read (its socket's send queue) before the scrapes begin: the
	// scraper holds a response it is not reading.
	hogBacklog = 512 << 10
	// scrapeHogs is how many slow-reading scrapers hold /metrics at once,
	// each from its own address (every pod has one).
	scrapeHogs = 8
)

// Node address: the kubelet probes from it. On loopback 127.0.0.1.
var nodeSrc = net.ParseIP("127.0.0.1")

// The kubelet's liveness probe stays green while a pod floods the listener
// with connections that pipeline /metrics, read slowly and keep connecting.
// (A flood from the node's own address, which the kubelet shares with
// hostNetwork pods: TestProbesGreenUnderFloodFromTheNodeAddress.)
func TestListenerFairUnderPipelinedMetricsFlood(t *testing.T) {
	for _, tc := range []struct {
		name     string
		floodSrc net.IP
	}{
		{"FloodFromAPodAddress", net.ParseIP("127.0.0.5")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, 4)
			d := n.startDaemon()
			eventually(t, "a sweep", func() (bool, string) {
				v := d.scrape().sweeps()
				return v >= 1, fmt.Sprintf("sweeps %v", v)
			})
			h := startHogs(d.Addr, tc.floodSrc, hogConns, hogPipeline, hogLife)
			defer h.stop()
			// The flood is under way: every hog has connected, and
			// connected again.
			eventually(t, "the flood under way", func() (bool, string) {
				c := h.connects.Load()
				return c >= 2*hogConns, fmt.Sprintf("%d of %d flood connections made", c, 2*hogConns)
			})
			ok, fails := 0, []string{}
			for i := range fairProbes {
				code, err := probe5s(nodeSrc, d.Addr, "/healthz")
				if err == nil && code == http.StatusOK {
					ok++
				} else {
					fails = append(fails, fmt.Sprintf("probe %d: %d %v", i, code, err))
				}
				time.Sleep(200 * time.Millisecond) // spread over the flood, not a bound
			}
			t.Logf("%d flood connections made; /healthz probes %d/%d answered 200 within %s",
				h.connects.Load(), ok, fairProbes, probeTimeout)
			if ok != fairProbes {
				t.Errorf("%d of %d liveness probes failed during the flood (the kubelet restarts the daemon after 3 in a row): %s",
					fairProbes-ok, fairProbes, strings.Join(fails, "; "))
			}
			h.stop()
			d.alive()
			if code, err := probe5s(nodeSrc, d.Addr, "/healthz"); err != nil || code != http.StatusOK {
				t.Errorf("/healthz after the flood: %d %v", code, err)
			}
		})
	}
}

// A flood from the node's own address (a hostNetwork pod shares it with the
// kubelet) cannot be told from the kubelet on the TCP listener. The
// DaemonSet's probes are exec probes over the pod's own unix socket
// (`hostlease-gc probe`, `run --probe-socket`): they stay green however the
// metrics port is flooded. The TCP probes from the same address are only
// logged, for contrast.
func TestProbesGreenUnderFloodFromTheNodeAddress(t *testing.T) {
	n := newNode(t, 4)
	sock := filepath.Join(t.TempDir(), "probe.sock")
	d := n.startDaemon("--probe-socket", sock)
	eventually(t, "a sweep", func() (bool, string) {
		v := d.scrape().sweeps()
		return v >= 1, fmt.Sprintf("sweeps %v", v)
	})
	h := startHogs(d.Addr, nodeSrc, hogConns, hogPipeline, hogLife)
	defer h.stop()
	eventually(t, "the flood under way", func() (bool, string) {
		c := h.connects.Load()
		return c >= 2*hogConns, fmt.Sprintf("%d of %d flood connections made", c, 2*hogConns)
	})
	ok, tcpOK, fails := 0, 0, []string{}
	for i := range fairProbes {
		for _, what := range []string{"healthz", "readyz"} {
			// As the kubelet runs an exec probe: the command, killed at the
			// probe's timeout.
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			out, err := exec.CommandContext(ctx, gcBin(), "probe", what, "--socket="+sock, "--timeout=4s").CombinedOutput()
			cancel()
			if err == nil {
				ok++
			} else {
				fails = append(fails, fmt.Sprintf("%s %d: %v %s", what, i, err, strings.TrimSpace(string(out))))
			}
		}
		if code, err := probe5s(nodeSrc, d.Addr, "/healthz"); err == nil && code == http.StatusOK {
			tcpOK++
		}
		time.Sleep(200 * time.Millisecond) // spread over the flood, not a bound
	}
	t.Logf("%d flood connections made from the node's address; exec probes %d/%d passed within %s; TCP /healthz from the same address (not the DaemonSet's probe) %d/%d",
		h.connects.Load(), ok, 2*fairProbes, probeTimeout, tcpOK, fairProbes)
	if ok != 2*fairProbes {
		t.Errorf("%d of %d exec probes failed during the flood (the kubelet restarts the daemon after 3 liveness failures in a row): %s",
			2*fairProbes-ok, 2*fairProbes, strings.Join(fails, "; "))
	}
	h.stop()
	d.alive()
}

// A few slow-reading scrapers, each from its own address, never turn a
// well-behaved Prometheus scrape into a 503.
func TestListenerServesPrometheusBesideSlowScrapers(t *testing.T) {
	n := newNode(t, 4)
	d := n.startDaemon()
	eventually(t, "a sweep", func() (bool, string) {
		v := d.scrape().sweeps()
		return v >= 1, fmt.Sprintf("sweeps %v", v)
	})
	var hogs []*hogs
	for i := range scrapeHogs {
		hogs = append(hogs, startHogs(d.Addr, net.IPv4(127, 0, 1, byte(10+i)), 1, hogPipeline, 0))
	}
	defer func() {
		for _, h := range hogs {
			h.stop()
		}
	}()
	// Every slow scraper holds responses it does not read.
	port := d.Addr[strings.LastIndex(d.Addr, ":")+1:]
	eventually(t, "every slow scraper behind by hogBacklog bytes", func() (bool, string) {
		q := sendQueues(t, port)
		behind := 0
		for i := range scrapeHogs {
			if q[net.IPv4(127, 0, 1, byte(10+i)).String()] >= hogBacklog {
				behind++
			}
		}
		conns := 0
		for _, h := range hogs {
			conns += int(h.connects.Load())
		}
		return behind == scrapeHogs, fmt.Sprintf("%d of %d slow scrapers (%d connections made) behind by %d bytes: %v", behind, scrapeHogs, conns, hogBacklog, q)
	})
	ok, fails := 0, []string{}
	for i := range fairProbes {
		code, err := probe5s(scrapeSrc, d.Addr, "/metrics")
		if err == nil && code == http.StatusOK {
			ok++
		} else {
			fails = append(fails, fmt.Sprintf("scrape %d: %d %v", i, code, err))
		}
		time.Sleep(500 * time.Millisecond) // spread, not a bound
	}
	t.Logf("%d slow scrapers; Prometheus's scrapes %d/%d answered 200 within %s", scrapeHogs, ok, fairProbes, probeTimeout)
	if ok != fairProbes {
		t.Errorf("%d of %d Prometheus scrapes failed while %d slow scrapers held /metrics: %s",
			fairProbes-ok, fairProbes, scrapeHogs, strings.Join(fails, "; "))
	}
	d.alive()
}

// probe5s makes one request from src on a fresh connection, as the kubelet's
// prober does (no keep-alive), with the probe's own timeout.
func probe5s(src net.IP, addr, path string) (int, error) {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	c := http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialer.DialContext}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// hogs are connections from one source address, each sending pipeline
// /metrics requests at once and then reading one byte every 100 ms through
// a small receive buffer; a connection the daemon closes is made again at
// once.
type hogs struct {
	done     chan struct{}
	wg       sync.WaitGroup
	connects atomic.Int64
	once     sync.Once
	reqs     string
	life     time.Duration // a connection is closed and made again after this (0: kept)

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startHogs(addr string, src net.IP, conns, pipeline int, life time.Duration) *hogs {
	h := &hogs{done: make(chan struct{}), conns: map[net.Conn]bool{}, reqs: strings.Repeat(hogReq, pipeline), life: life}
	dialer := &net.Dialer{
		LocalAddr: &net.TCPAddr{IP: src},
		Timeout:   hangGuard,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			}); err != nil {
				return err
			}
			return serr
		},
	}
	for i := range conns {
		h.wg.Go(func() {
			life := h.life + time.Duration(i)*time.Millisecond // not all at once
			for !h.stopped() {
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					select {
					case <-h.done:
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if !h.track(c) {
					return
				}
				h.connects.Add(1)
				h.hog(c, life)
				h.untrack(c)
			}
		})
	}
	return h
}

func (h *hogs) hog(c net.Conn, life time.Duration) {
	defer c.Close()
	if life > 0 {
		t := time.AfterFunc(life, func() { c.Close() })
		defer t.Stop()
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = c.Write([]byte(h.reqs))
	}()
	r := bufio.NewReaderSize(c, 16)
	var b [1]byte
	for !h.stopped() {
		if _, err := r.Read(b[:]); err != nil {
			break
		}
		select {
		case <-h.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.Close()
	<-written
}

const hogReq = "GET /metrics HTTP/1.1\r\nHost: hog\r\n\r\n"

func (h *hogs) track(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped() {
		c.Close()
		return false
	}
	h.conns[c] = true
	return true
}

func (h *hogs) untrack(c net.Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

func (h *hogs) stopped() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

func (h *hogs) stop() {
	h.once.Do(func() {
		close(h.done)
		h.mu.Lock()
		for c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
}

// sendQueues reads the kernel's TCP table (the test shares the daemon's
// network namespace) and returns, for each client address connected to the
// listener at local port, the bytes the daemon has written to it and it
// has not acknowledged (tx_queue), summed over its connections.
func sendQueues(t *testing.T, port string) map[string]int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(":%04X", p)
	q := map[string]int{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], want) || f[3] != "01" { // ESTABLISHED
			continue
		}
		remote, _, _ := strings.Cut(f[2], ":")
		ip, err := strconv.ParseUint(remote, 16, 32)
		if err != nil {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseUint(tx, 16, 64)
		if err != nil {
			continue
		}
		addr := net.IPv4(byte(ip), byte(ip>>8), byte(ip>>16), byte(ip>>24)).String()
		q[addr] += int(n)
	}
	return q
}
