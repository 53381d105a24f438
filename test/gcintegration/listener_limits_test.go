package gcintegration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The listener's limits hold exactly as docs/contracts.md states them.

// keepAlive is one client connection that makes requests one after the
// other, as Prometheus does.
type keepAlive struct {
	c net.Conn
	r *bufio.Reader
}

func dialFrom(t *testing.T, src, addr string) *keepAlive {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: hangGuard}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{c: c, r: bufio.NewReader(c)}
}

// get makes one request for path with extra header bytes and returns its
// status, or the error that ended the connection.
func (k *keepAlive) get(path, extra string) (int, error) {
	k.c.SetDeadline(time.Now().Add(hangGuard))
	req := "GET " + path + " HTTP/1.1\r\nHost: hostlease\r\n" + extra + "\r\n"
	werr := make(chan error, 1)
	go func() { _, err := io.WriteString(k.c, req); werr <- err }()
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		if we := <-werr; we != nil {
			return 0, fmt.Errorf("%v (writing: %v)", err, we)
		}
		return 0, err
	}
	<-werr
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// --http-max-header-bytes (8 KiB by default) bounds a request's header
// exactly: one over it gets 431 however much over, so no client makes the
// daemon read and hold more than that per connection.
func TestListenerHeaderLimit(t *testing.T) {
	n := newNode(t, 4)
	d := n.startDaemon()
	for _, tc := range []struct {
		name string
		size int // bytes of the one extra header field's value
		want int
	}{
		{"Small", 100, http.StatusOK},
		{"9KiB", 9 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"1MiB", 1 << 20, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := dialFrom(t, "127.0.0.2", d.Addr)
			code, err := k.get("/healthz", "X-Pad: "+strings.Repeat("a", tc.size)+"\r\n")
			if err != nil || code != tc.want {
				t.Errorf("a request with a %d-byte header field: %d %v, want %d", tc.size, code, err, tc.want)
			}
		})
	}
	d.alive()
}

// --http-max-connections N holds N connections, not one more: the N+1th
// sheds the oldest idle one (of the address holding the most; here one
// each). --http-max-connections-per-client M does the same within one
// address, whatever room the listener has.
func TestListenerConnectionCapsExact(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		srcs  []string // one connection from each, in order; the last is the one over the cap
	}{
		{"MaxConnections1", []string{"--http-max-connections", "1"}, []string{"127.0.0.2", "127.0.0.3"}},
		{"MaxConnections3", []string{"--http-max-connections", "3"}, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}},
		{"PerClient2", []string{"--http-max-connections-per-client", "2"}, []string{"127.0.0.2", "127.0.0.2", "127.0.0.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, 4)
			d := n.startDaemon(tc.flags...)
			// Requests for a path that is not a probe's (the listener never
			// sheds a connection serving a probe): the daemon answers 404.
			const path = "/nothing"
			var conns []*keepAlive
			for i, src := range tc.srcs {
				k := dialFrom(t, src, d.Addr)
				if code, err := k.get(path, ""); err != nil || code != http.StatusNotFound {
					t.Fatalf("connection %d (from %s): %d %v", i, src, code, err)
				}
				conns = append(conns, k)
			}
			// The last connection was accepted and answered; it shed
			// exactly one of the others (which one depends on when each
			// became idle), and the cap's worth are still held.
			held, closed := 0, []string{}
			for i, k := range conns {
				if code, err := k.get(path, ""); err == nil && code == http.StatusNotFound {
					held++
				} else if i == len(conns)-1 {
					t.Errorf("the newest connection (from %s) was closed: %d %v", tc.srcs[i], code, err)
				} else {
					closed = append(closed, fmt.Sprintf("%d from %s: %d %v", i, tc.srcs[i], code, err))
				}
			}
			if held != len(conns)-1 {
				t.Errorf("with %v, %d connections made one after the other: %d still held, want %d (closed: %v)",
					tc.flags, len(conns), held, len(conns)-1, closed)
			}
			d.alive()
		})
	}
}
