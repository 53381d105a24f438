package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// fakeAPIServer answers the daemon's API client over HTTP as an API server
// would: an empty pod list, a pod watch kept open until the client or the
// test ends it, and Event creations that hang until the test ends.
type fakeAPIServer struct {
	*httptest.Server
	mu      sync.Mutex
	watches []url.Values
	done    chan struct{}
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{done: make(chan struct{})}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods" && q.Get("watch") == "true":
			f.mu.Lock()
			f.watches = append(f.watches, q)
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			if q.Get("sendInitialEvents") == "true" {
				fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-f.done:
			}
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		case r.Method == http.MethodPost:
			select { // an API server that does not answer
			case <-r.Context().Done():
			case <-f.done:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() {
		close(f.done)
		f.Close()
	})
	return f
}

func (f *fakeAPIServer) watchQueries() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.watches...)
}

// kubeconfigFor writes a kubeconfig naming server.
func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The client KubeFromOptions builds keeps one pod watch for as long as the
// server keeps it (no client-side timeout on it, which would end it and
// make the informer watch again: 4 requests a quiet minute with a 15 s one),
// with bookmarks asked for; every other request is bounded on its own: an
// Event to an API server that never answers returns an error.
func TestKubeClientOneLongWatchBoundedRequests(t *testing.T) {
	api := newFakeAPIServer(t)
	o := &Options{Kubeconfig: kubeconfigFor(t, api.URL), NodeName: "node1"}
	cfg, err := restConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 0 {
		t.Errorf("the API client has an overall timeout of %s: it ends the pod watch when it expires", cfg.Timeout)
	}
	k, err := KubeFromOptions(o)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	k.requestTimeout = 200 * time.Millisecond
	if v := k.View(context.Background()); !v.Available {
		t.Fatalf("view %+v: the informer did not sync against the fake API server", v)
	}
	ws := api.watchQueries()
	if len(ws) == 0 {
		t.Fatal("the informer opened no pod watch")
	}
	for _, q := range ws {
		// The server's own timeout, as the reflector asks for it (5-10 min),
		// and client-go's timeout for the request no shorter.
		s, err := strconv.Atoi(q.Get("timeoutSeconds"))
		if err != nil || s < 300 {
			t.Errorf("pod watch %v: timeoutSeconds %q, want the reflector's >= 300", q, q.Get("timeoutSeconds"))
		}
		if d, err := time.ParseDuration(q.Get("timeout")); q.Has("timeout") && (err != nil || d < time.Duration(s)*time.Second) {
			t.Errorf("pod watch %v: its timeout %s ends it before the server's timeoutSeconds", q, q.Get("timeout"))
		}
		if q.Get("allowWatchBookmarks") != "true" {
			t.Errorf("pod watch %v does not ask for bookmarks", q)
		}
		if q.Get("fieldSelector") != "spec.nodeName=node1" {
			t.Errorf("pod watch %v is not filtered to this node", q)
		}
	}

	errc := make(chan error, 1)
	go func() {
		errc <- k.Event(context.Background(), reclaim.APIView{Enabled: true, Available: true}, &allocator.Record{}, "Normal", "AddressReclaimed", "m")
	}()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Event to an API server that never answers returned no error")
		}
	case <-time.After(hangGuard):
		t.Fatalf("hung: an Event to an API server that never answers did not return in %s", hangGuard)
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The pod watch is one long request that only the server ends: nothing on
// the client's side bounds it (no deadline on its request, no cancel when
// another request's timeout expires). A watch bounded by the request timeout
// (15 s) would end and be made again 4 times a quiet minute on every node.
func TestKubePodWatchNotEndedByTheClient(t *testing.T) {
	api := newFakeAPIServer(t)
	o := &Options{Kubeconfig: kubeconfigFor(t, api.URL), NodeName: "node1"}
	cfg, err := restConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var watches []*http.Request
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("watch") == "true" {
				mu.Lock()
				watches = append(watches, r)
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := NewKube(cs, "node1")
	defer k.Close()
	k.requestTimeout = 50 * time.Millisecond
	if v := k.View(context.Background()); !v.Available {
		t.Fatalf("view %+v: the informer did not sync against the fake API server", v)
	}
	// An Event to this server (which never answers one) ends when its
	// request timeout expires: a watch bounded by that timeout, started
	// before it, has ended by then.
	if err := k.Event(context.Background(), reclaim.APIView{Enabled: true, Available: true}, &allocator.Record{}, "Normal", "AddressReclaimed", "m"); err == nil {
		t.Fatal("an Event to an API server that never answers returned no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(watches) == 0 {
		t.Fatal("the informer opened no pod watch")
	}
	for i, r := range watches {
		if dl, ok := r.Context().Deadline(); ok {
			t.Errorf("pod watch %d (%s) has a client deadline (%s): the client ends it, and the informer makes another",
				i, r.URL.RawQuery, dl.Format(time.RFC3339Nano))
		}
		if err := r.Context().Err(); err != nil {
			t.Errorf("pod watch %d (%s) was ended by the client: %v", i, r.URL.RawQuery, err)
		}
	}
}
