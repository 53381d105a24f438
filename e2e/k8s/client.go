package k8s

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The suite's reads that repeat — every poll of waitUntil and of the
// bring-up, the samplers — go through one in-process client of the cluster's
// admin. kubectl stays for what an operator types (apply, apply -k, rollout,
// logs, exec, scale, delete): one kubectl process costs about 170 ms of CPU
// on a 2-core machine (its start-up, not the request), and the suite polled
// with it about twice a second, a third of the CPU the real-node suite used
// (docs/testing.md).

// readTimeout bounds one in-process read, as Kubectl's context bounds one
// kubectl.
const readTimeout = 30 * time.Second

// clientOf holds the client of each Cluster, built once it could be.
var clientOf = struct {
	sync.Mutex
	m map[*Cluster]kubernetes.Interface
}{m: map[*Cluster]kubernetes.Interface{}}

// Client is the cluster's admin client (system:masters, from c.Kubeconfig),
// kept for the life of c once built (a failure, e.g. before the kubeconfig
// is written, is tried again at the next call).
func (c *Cluster) Client() (kubernetes.Interface, error) {
	clientOf.Lock()
	defer clientOf.Unlock()
	if cs, ok := clientOf.m[c]; ok {
		return cs, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
	}
	// Polls of several goroutines at once must not queue behind
	// client-go's default limit of 5 requests a second.
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	clientOf.m[c] = cs
	return cs, nil
}

// read runs f with the cluster's client and a context bounded by readTimeout.
func (c *Cluster) read(f func(ctx context.Context, cs kubernetes.Interface) error) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	return f(ctx, cs)
}

// namespaceGone reports whether namespace ns no longer exists (false with
// the error when the read itself failed).
func (c *Cluster) namespaceGone(ns string) (bool, error) {
	err := c.read(func(ctx context.Context, cs kubernetes.Interface) error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// podNames lists the names of the pods of ns that match selector ("" for
// all), as `kubectl get pods -o name` without the "pod/" prefix.
func (c *Cluster) podNames(ns, selector string) ([]string, error) {
	pods, err := c.pods(ns, selector)
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names, err
}

// pods lists the pods of ns that match selector ("" for all).
func (c *Cluster) pods(ns, selector string) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := c.read(func(ctx context.Context, cs kubernetes.Interface) error {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if l != nil {
			pods = l.Items
		}
		return err
	})
	return pods, err
}

// pod reads pod name of ns; gone is true when it does not exist.
func (c *Cluster) pod(ns, name string) (p *corev1.Pod, gone bool, err error) {
	err = c.read(func(ctx context.Context, cs kubernetes.Interface) error {
		p, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	return p, false, err
}

// node reads the node.
func (c *Cluster) node() (*corev1.Node, error) {
	var n *corev1.Node
	err := c.read(func(ctx context.Context, cs kubernetes.Interface) (err error) {
		n, err = cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		return err
	})
	return n, err
}

// runningPod reports whether p is Running and not being deleted.
func runningPod(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
}
