package k8s

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Scenario 5 (full pool): the pool fills up. Prometheus, scraping the
// DaemonSet pod with deploy/prometheus's rules, fires the exhausted-pool
// alert and nothing else; with the shipped defaults the node stays Ready and
// nothing is evicted. With failStatusOnExhaustion: true the node goes
// NotReady as documented, gets the not-ready:NoExecute taint (a second,
// lease-renewed Node keeps the cluster out of the node lifecycle controller's
// full-disruption mode) and its pods are evicted after their toleration.
func TestFullPool(t *testing.T) {
	c := cluster(t)
	ensureInstalled(t, c)
	waitNodeReady(t, c)
	const ns, netName = "e2e-full", "hlk8s-full"
	conf := func(failStatus *bool) []byte {
		ipam := map[string]any{"type": "hostlease", "dataDir": CNIDataDir,
			"ranges": [][]map[string]string{{{"subnet": "10.251.2.0/24", "rangeStart": "10.251.2.10", "rangeEnd": "10.251.2.13"}}}}
		if failStatus != nil {
			ipam["failStatusOnExhaustion"] = *failStatus
		}
		return mustJSON(map[string]any{"cniVersion": "1.1.0", "name": netName, "plugins": []map[string]any{
			{"type": "bridge", "bridge": "hlk8s-br2", "isGateway": true, "ipam": ipam},
			{"type": "hostlease", "dataDir": CNIDataDir}}})
	}
	t.Cleanup(func() {
		if err := c.WriteConflist("10-hlk8s.conflist", podConflist(PodSubnet, false, nil)); err != nil {
			t.Error(err)
		}
		deleteNamespace(t, c, ns)
	})
	if err := c.WriteConflist("10-hlk8s.conflist", conf(nil)); err != nil {
		t.Fatal(err)
	}
	startPrometheus(t, c)
	apply(t, c, deployment(ns, "filler", 6))
	running := waitPodsRunning(t, c, ns, 4) // the pool holds 4

	waitUntil(t, 5*time.Minute, "HostleasePoolExhausted firing", func() (bool, string) {
		if st, why := nodeReady(c); st != "True" {
			t.Fatalf("node went %s (%s) on a full pool with the shipped defaults", st, why)
		}
		f, err := firingAlerts()
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(strings.Join(f, ","), "HostleasePoolExhausted"), fmt.Sprint(f)
	})
	if f, err := firingAlerts(); err != nil || fmt.Sprint(f) != "[HostleasePoolExhausted]" {
		t.Errorf("firing alerts %v (%v), want only HostleasePoolExhausted", f, err)
	}
	still := waitPodsRunning(t, c, ns, 4)
	for i := range running {
		if running[i].UID != still[i].UID {
			t.Errorf("pod %s replaced by %s on a full pool", running[i].Name, still[i].Name)
		}
	}
	if st, why := nodeReady(c); st != "True" {
		t.Fatalf("node %s (%s) on a full pool with the shipped defaults", st, why)
	}

	// Opt in: STATUS fails on exhaustion. A second Node keeps the cluster
	// "partially" healthy so the NoExecute taint is applied.
	stopNode2 := fakeNode(t, c, "hostlease-e2e-node2")
	defer stopNode2()
	apply(t, c, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: short-toleration, namespace: %s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  tolerations:
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
  containers:
  - {name: pause, image: %s, imagePullPolicy: Never}
`, ns, NodeName, pauseImage()))
	waitUntil(t, 2*time.Minute, "short-toleration pod Running", func() (bool, string) {
		p, _, err := c.pod(ns, "short-toleration")
		if err != nil || p == nil {
			return false, fmt.Sprint(err)
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	if err := c.WriteConflist("10-hlk8s.conflist", conf(ptr.To(true))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "node NotReady with failStatusOnExhaustion", func() (bool, string) {
		st, why := nodeReady(c)
		return st == "False", st + " " + why
	})
	waitUntil(t, 2*time.Minute, "not-ready:NoExecute taint", func() (bool, string) {
		n, err := c.node()
		if err != nil {
			return false, err.Error()
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == "node.kubernetes.io/not-ready" && taint.Effect == corev1.TaintEffectNoExecute {
				return true, ""
			}
		}
		return false, fmt.Sprint(n.Spec.Taints)
	})
	waitUntil(t, 2*time.Minute, "the pod with a 5s toleration evicted", func() (bool, string) {
		p, gone, err := c.pod(ns, "short-toleration")
		return gone || (p != nil && p.DeletionTimestamp != nil), fmt.Sprint(err)
	})
	// Back to the default: the node is Ready again.
	if err := c.WriteConflist("10-hlk8s.conflist", conf(nil)); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, c)
}

// fakeNode registers a Node with no kubelet and renews its Lease (and Ready
// condition) until the returned stop is called, which also deletes it.
func fakeNode(t testing.TB, c *Cluster, name string) (stop func()) {
	t.Helper()
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var renewOnce func() error
	// Unschedulable and tainted: nothing may run there (there is no kubelet).
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "hostlease.e2e/no-kubelet", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	renew := func() error { return retry.RetryOnConflict(retry.DefaultRetry, renewOnce) }
	renewOnce = func() error {
		now := metav1.NowMicro()
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		leases := cs.CoordinationV1().Leases("kube-node-lease")
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			return err
		}
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(3 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				if err := renew(); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "e2e/k8s: renew %s: %v\n", name, err)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		bg := context.Background()
		_ = cs.CoreV1().Nodes().Delete(bg, name, metav1.DeleteOptions{})
		_ = cs.CoordinationV1().Leases("kube-node-lease").Delete(bg, name, metav1.DeleteOptions{})
	}
}
