package k8s

import (
	"context"
	"encoding/json"
	"fmt"
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

// ContainerPID is the host PID of the running container named container in
// pod (namespace ns), from CRI's verbose container status.
func (c *Cluster) ContainerPID(ns, pod, container string) (int, error) {
	pid := 0
	err := cri(func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		r, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod,
				"io.kubernetes.container.name": container}}})
		if err != nil {
			return err
		}
		if len(r.Containers) != 1 {
			return fmt.Errorf("%d running containers %s in pod %s/%s, want 1", len(r.Containers), container, ns, pod)
		}
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: r.Containers[0].Id, Verbose: true})
		if err != nil {
			return err
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 1 {
			return fmt.Errorf("container %s: no pid in its verbose status (%v): %.200s", r.Containers[0].Id, err, st.Info["info"])
		}
		pid = info.Pid
		return nil
	})
	return pid, err
}
