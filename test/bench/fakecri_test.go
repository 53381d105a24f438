package bench

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchSandbox is one pod sandbox the fake runtime lists.
type benchSandbox struct {
	id, name, namespace, uid string
	ip                       netip.Addr
}

// fakeRuntime is a real gRPC CRI RuntimeService on a unix socket, serving the
// calls hostlease-gc makes (ListPodSandbox, PodSandboxStatus; Version and
// Status for good measure). Every sandbox it knows is READY; a sandbox it
// does not list is absent, as one that was removed.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	dir, sock string
	srv       *grpc.Server

	mu        sync.Mutex
	sandboxes map[string]*benchSandbox
	order     []string // sorted IDs

	lists, statuses atomic.Int64
}

// startFakeRuntime serves sandboxes on a socket in a short temporary
// directory (unix socket paths are limited to 108 bytes).
func startFakeRuntime(sandboxes []benchSandbox) (*fakeRuntime, error) {
	dir, err := os.MkdirTemp("", "hlb-cri-")
	if err != nil {
		return nil, err
	}
	f := &fakeRuntime{dir: dir, sock: filepath.Join(dir, "cri.sock"), sandboxes: map[string]*benchSandbox{}}
	for i := range sandboxes {
		sb := sandboxes[i]
		f.sandboxes[sb.id] = &sb
		f.order = append(f.order, sb.id)
	}
	sort.Strings(f.order)
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f.srv = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// Endpoint is the --cri-endpoint value for this runtime.
func (f *fakeRuntime) Endpoint() string { return "unix://" + f.sock }

func (f *fakeRuntime) Stop() {
	f.srv.Stop()
	os.RemoveAll(f.dir)
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "hostlease-bench", RuntimeVersion: "0.0.1", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.lists.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{Items: make([]*runtimeapi.PodSandbox, 0, len(f.order))}
	for _, id := range f.order {
		if flt := req.GetFilter(); flt != nil && flt.Id != "" && flt.Id != id {
			continue
		}
		sb := f.sandboxes[id]
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id:       sb.id,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: sb.name, Namespace: sb.namespace, Uid: sb.uid},
			State:    runtimeapi.PodSandboxState_SANDBOX_READY,
		})
	}
	return resp, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.statuses.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[req.PodSandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find sandbox %q: not found", req.PodSandboxId)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{
		Id:       sb.id,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: sb.name, Namespace: sb.namespace, Uid: sb.uid},
		State:    runtimeapi.PodSandboxState_SANDBOX_READY,
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: sb.ip.String()},
	}}, nil
}
