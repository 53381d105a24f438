package gcintegration

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

// listMode is how the fake runtime answers ListPodSandbox.
type listMode int

const (
	listNormal listMode = iota // every sandbox in the set
	listFail                   // a gRPC Unavailable error
	listHang                   // block until the caller gives up (its deadline)
	listEmpty                  // a successful, empty answer
)

func (m listMode) String() string {
	return [...]string{"normal", "fail", "hang", "empty"}[m]
}

// fakeSandbox is one pod sandbox the fake runtime knows.
type fakeSandbox struct {
	ID, Name, Namespace, UID string
	State                    runtimeapi.PodSandboxState
	IPs                      []netip.Addr
	Created                  time.Time
}

// fakeCRI is a real gRPC CRI RuntimeService on a unix socket whose sandboxes a
// test sets. Only the calls hostlease-gc makes are implemented (ListPodSandbox,
// PodSandboxStatus) plus Version and Status; anything else is Unimplemented, as
// from a runtime that lacks it.
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	sock string
	srv  *grpc.Server

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	mode      listMode
	changed   chan struct{} // closed and replaced whenever mode changes
	lists     int           // ListPodSandbox calls received
	answered  int           // ListPodSandbox calls answered successfully
	hanging   int           // ListPodSandbox calls blocked right now
	statuses  int           // PodSandboxStatus calls received
}

// startFakeCRI serves a fake runtime until the test ends. The socket lives in
// a short temporary directory: unix socket paths are limited to 108 bytes and
// t.TempDir() paths of long test names exceed that.
func startFakeCRI(t testing.TB) *fakeCRI {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeCRI{sock: filepath.Join(dir, "cri.sock"), sandboxes: map[string]*fakeSandbox{}, changed: make(chan struct{})}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// Start serves on the socket (again, after Stop: a runtime restart).
func (f *fakeCRI) Start() error {
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
func (f *fakeCRI) Stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Endpoint is the --cri-endpoint value for this runtime.
func (f *fakeCRI) Endpoint() string { return "unix://" + f.sock }

// Put adds or replaces a sandbox.
func (f *fakeCRI) Put(sb fakeSandbox) {
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
func (f *fakeCRI) Ready(id string, ips ...netip.Addr) {
	f.Put(fakeSandbox{ID: id, State: runtimeapi.PodSandboxState_SANDBOX_READY, IPs: ips})
}

// NotReady lists sandbox id as NOTREADY (stopped, not yet removed).
func (f *fakeCRI) NotReady(id string) {
	f.Put(fakeSandbox{ID: id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY})
}

// Remove forgets a sandbox, as the runtime does when the sandbox is removed.
func (f *fakeCRI) Remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
}

// SetMode switches how ListPodSandbox answers from now on. A call hanging
// when the mode changes answers in the new mode (a runtime that recovers).
func (f *fakeCRI) SetMode(m listMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = m
	close(f.changed)
	f.changed = make(chan struct{})
}

// Counts returns how many ListPodSandbox calls arrived, how many were
// answered successfully and how many are blocked right now.
func (f *fakeCRI) Counts() (lists, answered, hanging int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.answered, f.hanging
}

func (f *fakeCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fakecri", RuntimeVersion: "0.0.1", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

func (f *fakeCRI) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	for f.mode == listHang {
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
	if f.mode == listFail {
		return nil, status.Error(codes.Unavailable, "fakecri: runtime is restarting")
	}
	f.answered++
	resp := &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{}}
	if f.mode == listEmpty {
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

func (f *fakeCRI) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
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
