// Package fakecri is a real gRPC CRI RuntimeService on a unix socket whose
// sandboxes a test sets: the runtime hostlease-gc talks to, in integration
// tests and benchmarks. Only the calls the daemon makes are implemented
// (ListPodSandbox, PodSandboxStatus) plus Version and Status; anything else is
// Unimplemented, as from a runtime that lacks it.
package fakecri

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListMode is how the fake runtime answers ListPodSandbox.
type ListMode int

const (
	ListNormal ListMode = iota // every sandbox in the set
	ListFail                   // a gRPC Unavailable error
	ListHang                   // block until the caller gives up (its deadline)
	ListEmpty                  // a successful, empty answer
)

func (m ListMode) String() string {
	return [...]string{"normal", "fail", "hang", "empty"}[m]
}

// Sandbox is one pod sandbox the fake runtime knows.
type Sandbox struct {
	ID, Name, Namespace, UID string
	State                    runtimeapi.PodSandboxState
	IPs                      []netip.Addr
	Created                  time.Time
}

// Server is a real gRPC CRI RuntimeService on a unix socket whose sandboxes a
// test sets. Only the calls hostlease-gc makes are implemented (ListPodSandbox,
// PodSandboxStatus) plus Version and Status; anything else is Unimplemented, as
// from a runtime that lacks it.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	sock string
	srv  *grpc.Server

	mu        sync.Mutex
	sandboxes map[string]*Sandbox
	mode      ListMode
	changed   chan struct{} // closed and replaced whenever mode changes
	lists     int           // ListPodSandbox calls received
	answered  int           // ListPodSandbox calls answered successfully
	hanging   int           // ListPodSandbox calls blocked right now
	statuses  int           // PodSandboxStatus calls received
}

// New makes a fake runtime that will serve on the unix socket path sock once
// started. Keep sock short: unix socket paths are limited to 108 bytes.
func New(sock string) *Server {
	return &Server{sock: sock, sandboxes: map[string]*Sandbox{}, changed: make(chan struct{})}
}

// Lists returns how many ListPodSandbox calls arrived.
func (f *Server) Lists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// Start serves on the socket (again, after Stop: a runtime restart).
func (f *Server) Start() error {
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// Stop shuts the runtime down: the socket goes away and calls in flight
// (a hanging ListPodSandbox) end. Stop, not GracefulStop, which would wait
// for them.
func (f *Server) Stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Endpoint is the --cri-endpoint value for this runtime.
func (f *Server) Endpoint() string { return "unix://" + f.sock }

// Put adds or replaces a sandbox.
func (f *Server) Put(sb Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb.Created.IsZero() {
		sb.Created = time.Now()
	}
	if sb.Name == "" {
		sb.Name = "pod-" + sb.ID
	}
	if sb.Namespace == "" {
		sb.Namespace = "default"
	}
	if sb.UID == "" {
		sb.UID = "uid-" + sb.ID
	}
	f.sandboxes[sb.ID] = &sb
}

// Ready lists sandbox id as READY with the given addresses.
func (f *Server) Ready(id string, ips ...netip.Addr) {
	f.Put(Sandbox{ID: id, State: runtimeapi.PodSandboxState_SANDBOX_READY, IPs: ips})
}

// NotReady lists sandbox id as NOTREADY (stopped, not yet removed).
func (f *Server) NotReady(id string) {
	f.Put(Sandbox{ID: id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY})
}

// Remove forgets a sandbox, as the runtime does when the sandbox is removed.
func (f *Server) Remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
}

// SetMode switches how ListPodSandbox answers from now on. A call hanging
// when the mode changes answers in the new mode (a runtime that recovers).
func (f *Server) SetMode(m ListMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = m
	close(f.changed)
	f.changed = make(chan struct{})
}

// Counts returns how many ListPodSandbox calls arrived, how many were
// answered successfully and how many are blocked right now.
func (f *Server) Counts() (lists, answered, hanging int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.answered, f.hanging
}

func (f *Server) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fakecri", RuntimeVersion: "0.0.1", RuntimeApiVersion: "v1"}, nil
}

func (f *Server) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

func (f *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	for f.mode == ListHang {
		changed := f.changed
		f.hanging++
		f.mu.Unlock()
		select {
		case <-ctx.Done(): // the client's deadline, or the server stopping
		case <-changed:
		}
		f.mu.Lock()
		f.hanging--
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	if f.mode == ListFail {
		return nil, status.Error(codes.Unavailable, "fakecri: runtime is restarting")
	}
	f.answered++
	resp := &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{}}
	if f.mode == ListEmpty {
		return resp, nil
	}
	ids := make([]string, 0, len(f.sandboxes))
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		sb := f.sandboxes[id]
		if flt := req.GetFilter(); flt != nil {
			if flt.Id != "" && flt.Id != id {
				continue
			}
			if st := flt.GetState(); st != nil && st.State != sb.State {
				continue
			}
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id:        sb.ID,
			Metadata:  &runtimeapi.PodSandboxMetadata{Name: sb.Name, Namespace: sb.Namespace, Uid: sb.UID},
			State:     sb.State,
			CreatedAt: sb.Created.UnixNano(),
		})
	}
	return resp, nil
}

func (f *Server) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	sb, ok := f.sandboxes[req.PodSandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find sandbox %q: not found", req.PodSandboxId)
	}
	st := &runtimeapi.PodSandboxStatus{
		Id:        sb.ID,
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: sb.Name, Namespace: sb.Namespace, Uid: sb.UID},
		State:     sb.State,
		CreatedAt: sb.Created.UnixNano(),
		Network:   &runtimeapi.PodSandboxNetworkStatus{},
	}
	for i, ip := range sb.IPs {
		if i == 0 {
			st.Network.Ip = ip.String()
			continue
		}
		st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip.String()})
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st}, nil
}

// StartForTest starts a server for the rest of the test on a socket in a
// fresh short temporary directory (a unix socket path is limited to 108
// bytes, which t.TempDir's paths for long test names exceed), stops it and
// removes the directory when the test ends.
func StartForTest(t testing.TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := New(filepath.Join(dir, "cri.sock"))
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}
