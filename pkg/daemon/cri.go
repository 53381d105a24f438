package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/hostlease/hostlease/pkg/reclaim"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI is the part of the runtime the daemon reads. The production
// implementation speaks k8s.io/cri-api over the runtime's unix socket.
type CRI interface {
	// ListSandboxes lists every pod sandbox the runtime knows.
	ListSandboxes(ctx context.Context) ([]reclaim.PodSandbox, error)
	// SandboxIPs returns the addresses the runtime reports for a sandbox.
	SandboxIPs(ctx context.Context, id string) ([]netip.Addr, error)
	Close() error
}

type criClient struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

// DialCRI connects to a CRI endpoint such as unix:///run/containerd/containerd.sock.
// The connection is lazy: an unreachable runtime shows up as call errors.
func DialCRI(endpoint string) (CRI, error) {
	target := endpoint
	if !strings.Contains(target, "://") {
		target = "unix://" + target
	}
	if !strings.HasPrefix(target, "unix://") {
		return nil, fmt.Errorf("--cri-endpoint %q: only unix:// endpoints are supported", endpoint)
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// After a runtime restart, reconnect within seconds: gRPC's default
		// backoff grows to 120s, which would keep cri_up at 0 long after the
		// runtime is back.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("--cri-endpoint %q: %w", endpoint, err)
	}
	return &criClient{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

func (c *criClient) ListSandboxes(ctx context.Context) ([]reclaim.PodSandbox, error) {
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]reclaim.PodSandbox, 0, len(resp.Items))
	for _, it := range resp.Items {
		sb := reclaim.PodSandbox{ID: it.Id, State: sandboxState(it.State)}
		if m := it.Metadata; m != nil {
			sb.PodNamespace, sb.PodName, sb.PodUID = m.Namespace, m.Name, m.Uid
		}
		out = append(out, sb)
	}
	return out, nil
}

func sandboxState(s runtimeapi.PodSandboxState) string {
	switch s {
	case runtimeapi.PodSandboxState_SANDBOX_READY:
		return reclaim.SandboxReady
	case runtimeapi.PodSandboxState_SANDBOX_NOTREADY:
		return reclaim.SandboxNotReady
	}
	return reclaim.SandboxUnknown
}

func (c *criClient) SandboxIPs(ctx context.Context, id string) ([]netip.Addr, error) {
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if st := resp.Status; st != nil && st.Network != nil {
		if a, err := netip.ParseAddr(st.Network.Ip); err == nil {
			ips = append(ips, a.Unmap())
		}
		for _, extra := range st.Network.AdditionalIps {
			if a, err := netip.ParseAddr(extra.Ip); err == nil {
				ips = append(ips, a.Unmap())
			}
		}
	}
	return ips, nil
}

func (c *criClient) Close() error { return c.conn.Close() }

// criTimeout bounds each CRI call; a slower answer counts as a failure.
const criTimeout = 15 * time.Second

// ListView asks CRI for every sandbox and judges whether the answer can be
// trusted. A failed call or an implausible answer (a sandbox without an ID, or
// no sandboxes at all while committed allocations exist) yields an incomplete
// view, which reclaims nothing.
func ListView(ctx context.Context, cri CRI, committed int, now time.Time) (reclaim.CRIView, []reclaim.PodSandbox) {
	v := reclaim.CRIView{ListedAt: now, Sandboxes: map[string]reclaim.PodSandbox{}}
	ctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	list, err := cri.ListSandboxes(ctx)
	if err != nil {
		v.Why = "ListPodSandbox: " + err.Error()
		return v, nil
	}
	v.Sandboxes = make(map[string]reclaim.PodSandbox, len(list))
	for _, sb := range list {
		if sb.ID == "" {
			v.Why = "ListPodSandbox returned a sandbox without an ID"
			return v, nil
		}
		v.Sandboxes[sb.ID] = reclaim.PodSandbox{ID: sb.ID, State: sb.State}
	}
	if len(list) == 0 && committed > 0 {
		v.Why = fmt.Sprintf("ListPodSandbox returned no sandboxes while %d committed allocations exist", committed)
		return v, list
	}
	v.Complete = true
	return v, list
}
