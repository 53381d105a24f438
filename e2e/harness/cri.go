package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultTimeout bounds a CRI call made through the helpers when the caller's
// context has no deadline of its own.
const DefaultTimeout = 2 * time.Minute

// Pod names a pod sandbox the way kubelet does. containerd derives the
// sandbox name name_namespace_uid_attempt from it; two RunPodSandbox calls
// with the same Pod are the same sandbox name (a second one fails while the
// first exists).
type Pod struct {
	Name      string
	Namespace string // default "default"
	UID       string // default "uid-" + Name
	Attempt   uint32
	Labels    map[string]string
}

// Runtime is the raw CRI runtime client (valid until the next Restart).
func (e *Env) Runtime() runtimeapi.RuntimeServiceClient { return e.rt }

// Images is the raw CRI image client (valid until the next Restart).
func (e *Env) Images() runtimeapi.ImageServiceClient { return e.img }

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// SandboxConfig returns the PodSandboxConfig the helpers use for p: metadata,
// hostname, the env's cgroup parent, and a pod network namespace.
func (e *Env) SandboxConfig(p Pod) *runtimeapi.PodSandboxConfig {
	ns := p.Namespace
	if ns == "" {
		ns = "default"
	}
	uid := p.UID
	if uid == "" {
		uid = "uid-" + p.Name
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: ns, Uid: uid, Attempt: p.Attempt},
		Hostname: p.Name,
		Labels:   p.Labels,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: e.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_POD,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// RunPodSandbox starts a sandbox for p and returns its ID. The call is
// bounded by ctx, or by DefaultTimeout when ctx has no deadline.
func (e *Env) RunPodSandbox(ctx context.Context, p Pod) (string, error) {
	return e.RunPodSandboxConfig(ctx, e.SandboxConfig(p))
}

// RunPodSandboxConfig is RunPodSandbox with a caller-built config.
func (e *Env) RunPodSandboxConfig(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := e.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

// ListPodSandbox lists all sandboxes CRI knows about.
func (e *Env) ListPodSandbox(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := e.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Items, nil
}

// PodSandboxStatus returns a sandbox's status and its IPs (primary first).
func (e *Env) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, []string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := e.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return nil, nil, err
	}
	st := resp.GetStatus()
	var ips []string
	if n := st.GetNetwork(); n != nil {
		if n.Ip != "" {
			ips = append(ips, n.Ip)
		}
		for _, a := range n.AdditionalIps {
			ips = append(ips, a.GetIp())
		}
	}
	return st, ips, nil
}

// StopPodSandbox stops a sandbox (CNI DEL runs here).
func (e *Env) StopPodSandbox(ctx context.Context, id string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	_, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

// RemovePodSandbox removes a stopped sandbox.
func (e *Env) RemovePodSandbox(ctx context.Context, id string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	_, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

// Status returns the NetworkReady condition of CRI Status and the verbose
// info map (keys "cniconfig", "lastCNILoadStatus", "config", ...).
func (e *Env) Status(ctx context.Context) (*runtimeapi.RuntimeCondition, map[string]string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := e.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return nil, nil, err
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c, resp.Info, nil
		}
	}
	return nil, resp.Info, errors.New("CRI Status has no NetworkReady condition")
}

// WaitNetworkReady polls Status until NetworkReady is true and the loaded CNI
// config names network (skip that check with network == ""); containerd
// reloads the conf dir asynchronously after WriteConflist. timeout is a hang
// guard: the test fails as hung after it.
func (e *Env) WaitNetworkReady(network string, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		cond, info, err := e.Status(context.Background())
		switch {
		case err != nil:
			last = err.Error()
		case !cond.Status:
			last = fmt.Sprintf("NetworkReady=false reason=%q message=%q", cond.Reason, cond.Message)
		case network != "" && !strings.Contains(info["cniconfig"], fmt.Sprintf("%q", network)):
			last = "loaded CNI config does not name network " + network
		default:
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("hung: network %q not ready within the %v hang guard: %s\n%s", network, timeout, last, e.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
