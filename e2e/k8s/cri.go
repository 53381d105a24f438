package k8s

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cri runs f with a CRI runtime client of the node's containerd.
func cri(f func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error) error {
	conn, err := grpc.NewClient("unix://"+Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return f(ctx, runtimeapi.NewRuntimeServiceClient(conn))
}

// Sandboxes lists the node's pod sandboxes as CRI sees them.
func (c *Cluster) Sandboxes() ([]*runtimeapi.PodSandbox, error) {
	var out []*runtimeapi.PodSandbox
	err := cri(func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		r, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		out = r.GetItems()
		return err
	})
	return out, err
}

func (c *Cluster) sandboxIDs() ([]string, error) {
	sbs, err := c.Sandboxes()
	var ids []string
	for _, sb := range sbs {
		ids = append(ids, sb.Id)
	}
	return ids, err
}

func (c *Cluster) stopRemoveSandbox(id string) error {
	return cri(func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			return err
		}
		_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
}
