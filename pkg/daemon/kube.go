package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// Kube is the daemon's view of the Kubernetes API: the pods on this node (for
// vetoes) and Events (for reclaims). A nil Kube means "no API server".
//
// The pods come from an informer filtered to this node (fieldSelector
// spec.nodeName=<node>), started on the first View: one LIST, then one WATCH
// with bookmarks, kept open until the server ends it (the reflector asks for
// 5-10 minutes), instead of a LIST per sweep: a quiet node costs the API
// server at most one request a minute. The client has no overall timeout
// (it would end the watch too); every other request is bounded by its own
// context (requestTimeout). Its cache keeps only what a veto needs (UID,
// namespace, name, phase, IPs).
type Kube struct {
	client kubernetes.Interface
	node   string
	// syncWait bounds how long the first View waits for the informer's
	// initial LIST; later Views never wait (the informer keeps retrying).
	syncWait time.Duration
	// requestTimeout bounds each request that is not the watch (the
	// informer's LIST, an Event).
	requestTimeout time.Duration

	once     sync.Once
	informer cache.SharedIndexInformer
	stop     chan struct{}
}

// NewKube wraps a clientset for the given node.
func NewKube(client kubernetes.Interface, node string) *Kube {
	return &Kube{client: client, node: node, syncWait: 10 * time.Second, requestTimeout: 15 * time.Second}
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
	cfg, err := restConfig(o)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewKube(cs, o.NodeName), nil
}

// restConfig is the API client's configuration from --kubeconfig (in-cluster
// when empty). It has no overall timeout: that bounds a watch's whole
// response and so would end the pod watch every time it expires (see Kube).
func restConfig(o *Options) (*rest.Config, error) {
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
	cfg.UserAgent = "hostlease-gc/" + Version
	return cfg, nil
}

// start runs the node-filtered pod informer (once).
func (k *Kube) start() {
	k.once.Do(func() {
		k.stop = make(chan struct{})
		byNode := func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + k.node }
		pods := k.client.CoreV1().Pods(metav1.NamespaceAll)
		// The client tells the reflector whether it can stream the initial
		// list over the watch (real API servers) or must LIST first (fakes).
		lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				byNode(&o)
				ctx, cancel := context.WithTimeout(ctx, k.requestTimeout)
				defer cancel()
				return pods.List(ctx, o)
			},
			// The watch lives as long as the server keeps it (the
			// reflector's timeoutSeconds); bookmarks let it resume from a
			// recent resourceVersion without a new LIST.
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				byNode(&o)
				o.AllowWatchBookmarks = true
				return pods.Watch(ctx, o)
			},
		}, k.client)
		k.informer = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
		_ = k.informer.SetTransform(trimPod)
		go k.informer.Run(k.stop)
	})
}

// Close stops the informer.
func (k *Kube) Close() {
	if k == nil || k.stop == nil {
		return
	}
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
}

// trimPod keeps what a veto and an Event need: the informer caches 110 pods
// of a node in a few hundred kilobytes instead of their full specs.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// View returns the pods bound to this node from the informer's cache.
// Available is false until the informer's first LIST has completed. A pod
// created after the cache last heard from the API server is covered by
// --min-age, as with any read of a cache.
func (k *Kube) View(ctx context.Context) reclaim.APIView {
	if k == nil {
		return reclaim.APIView{}
	}
	k.start()
	v := reclaim.APIView{Enabled: true, PodsByUID: map[string]reclaim.Pod{}}
	if !k.informer.HasSynced() {
		wctx, cancel := context.WithTimeout(ctx, k.syncWait)
		synced := cache.WaitForCacheSync(wctx.Done(), k.informer.HasSynced)
		cancel()
		k.syncWait = 0 // wait once; later sweeps take the cache as it is
		if !synced {
			return v
		}
	}
	v.Available = true
	for _, obj := range k.informer.GetStore().List() {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		pod := reclaim.Pod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
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
// record's pod when it still exists (as the sweep's view, or else the
// informer, knows), otherwise on this node. Failing to post an Event never
// stops a sweep.
func (k *Kube) Event(ctx context.Context, api reclaim.APIView, r *allocator.Record, eventType, reason, msg string) error {
	if k == nil {
		return nil
	}
	ref := corev1.ObjectReference{Kind: "Node", Name: k.node, APIVersion: "v1"}
	ns := metav1.NamespaceDefault
	if r != nil && r.PodUID != "" && !api.Available {
		// A reclaim with proof of death is decided without the API; whether
		// the pod still exists comes from the same node-filtered informer.
		api = k.View(ctx)
	}
	if r != nil {
		if pod, ok := api.PodsByUID[r.PodUID]; ok && r.PodUID != "" {
			ref = corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: k8stypes.UID(pod.UID), APIVersion: "v1"}
			ns = pod.Namespace
		}
	}
	ctx, cancel := context.WithTimeout(ctx, k.requestTimeout)
	defer cancel()
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
