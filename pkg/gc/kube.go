package gc

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Kube is the daemon's view of the Kubernetes API: the pods on this node (for
// vetoes) and Events (for reclaims). A nil Kube means "no API server".
type Kube struct {
	client kubernetes.Interface
	node   string
}

// NewKube wraps a clientset for the given node.
func NewKube(client kubernetes.Interface, node string) *Kube {
	return &Kube{client: client, node: node}
}

// KubeFromOptions builds the API client from --kubeconfig (in-cluster config
// when empty). It returns nil with --no-api.
func KubeFromOptions(o *Options) (*Kube, error) {
	if o.NoAPI {
		return nil, nil
	}
	if o.NodeName == "" {
		return nil, fmt.Errorf("--node-name (or NODE_NAME) is required to use the API server; pass --no-api to run without it")
	}
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w (pass --no-api to run without an API server)", err)
	}
	cfg.Timeout = 15 * time.Second
	cfg.UserAgent = "hostlease-gc/" + Version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewKube(cs, o.NodeName), nil
}

// View lists the pods bound to this node. ResourceVersion "0" lets the API
// server answer from its cache, which is cheap; a pod created after that cache
// was filled is covered by --min-age.
func (k *Kube) View(ctx context.Context) APIView {
	if k == nil {
		return APIView{}
	}
	v := APIView{Enabled: true, PodsByUID: map[string]Pod{}}
	pods, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector:   "spec.nodeName=" + k.node,
		ResourceVersion: "0",
	})
	if err != nil {
		return v
	}
	v.Available = true
	for i := range pods.Items {
		p := &pods.Items[i]
		pod := Pod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
			Terminated: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
		for _, pip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(pip.IP); err == nil {
				pod.IPs = append(pod.IPs, a.Unmap())
			}
		}
		if len(pod.IPs) == 0 {
			if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
				pod.IPs = append(pod.IPs, a.Unmap())
			}
		}
		v.PodsByUID[pod.UID] = pod
	}
	return v
}

// Event records a reclaim (or a refused sweep) as a Kubernetes Event: on the
// record's pod when it still exists, otherwise on this node. Failing to post
// an Event never stops a sweep.
func (k *Kube) Event(ctx context.Context, api APIView, r *allocator.Record, eventType, reason, msg string) error {
	if k == nil {
		return nil
	}
	ref := corev1.ObjectReference{Kind: "Node", Name: k.node, APIVersion: "v1"}
	ns := metav1.NamespaceDefault
	if r != nil {
		if pod, ok := api.PodsByUID[r.PodUID]; ok && r.PodUID != "" {
			ref = corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: k8stypes.UID(pod.UID), APIVersion: "v1"}
			ns = pod.Namespace
		}
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: "hostlease-", Namespace: ns},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             msg,
		Type:                eventType,
		Source:              corev1.EventSource{Component: "hostlease-gc", Host: k.node},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "hostlease.dev/hostlease-gc",
		ReportingInstance:   "hostlease-gc-" + k.node,
	}
	_, err := k.client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
