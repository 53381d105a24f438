package daemon

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// waitObserved waits until the informer (when started) holds p as written:
// the informer is asynchronous, tests that change a pod and sweep at once
// wait for it here.
func (k *Kube) waitObserved(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if k == nil || k.informer == nil {
		return // not started: its first LIST will see p
	}
	want, _ := trimPod(p)
	deadline := time.Now().Add(hangGuard)
	for time.Now().Before(deadline) {
		obj, ok, _ := k.informer.GetStore().GetByKey(p.Namespace + "/" + p.Name)
		if ok {
			got := obj.(*corev1.Pod)
			w := want.(*corev1.Pod)
			if got.UID == w.UID && reflect.DeepEqual(got.Status, w.Status) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("hung: the informer did not observe pod %s/%s in %s", p.Namespace, p.Name, hangGuard)
}

func TestKubeViewFromNodeInformer(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	mk := func(name, node, ip string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name),
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
		}
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, mk("a", "node1", "10.0.0.2", corev1.PodRunning), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := NewKube(client, "node1")
	defer k.Close()
	v := k.View(ctx)
	if !v.Enabled || !v.Available {
		t.Fatalf("view %+v, want enabled and available", v)
	}
	if p := v.PodsByUID["uid-a"]; p.Name != "a" || len(p.IPs) != 1 || p.IPs[0] != netip.MustParseAddr("10.0.0.2") || p.Terminated {
		t.Fatalf("pod a in view: %+v", p)
	}
	// Changes arrive through the watch, without another LIST.
	b := mk("b", "node1", "10.0.0.3", corev1.PodSucceeded)
	if _, err := client.CoreV1().Pods("default").Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.waitObserved(t, b)
	v = k.View(ctx)
	if p := v.PodsByUID["uid-b"]; !p.Terminated {
		t.Fatalf("pod b %+v, want terminated", p)
	}
	lists := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			lists++
			if fs := a.(k8stesting.ListAction).GetListRestrictions().Fields.String(); fs != "spec.nodeName=node1" {
				t.Errorf("pod LIST with field selector %q, want spec.nodeName=node1", fs)
			}
		}
	}
	if lists != 1 {
		t.Errorf("%d pod LISTs for two views, want 1 (then the watch)", lists)
	}
	// The cache keeps only what vetoes need.
	obj, _, _ := k.informer.GetStore().GetByKey("default/a")
	if p := obj.(*corev1.Pod); len(p.ManagedFields) != 0 || len(p.Spec.Containers) != 0 {
		t.Errorf("cached pod not trimmed: %+v", p)
	}
}

func TestKubeViewUnavailableUntilListed(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	k := NewKube(client, "node1")
	k.syncWait = 100 * time.Millisecond
	defer k.Close()
	if v := k.View(context.Background()); !v.Enabled || v.Available {
		t.Fatalf("view %+v while the LIST fails, want enabled and unavailable", v)
	}
}

// A reclaim decided without the API (proof of death) still gets its Event on
// the pod while the pod exists, and on the node once it is gone.
func TestKubeEventOnPodWithoutSweepView(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-1"},
		Spec: corev1.PodSpec{NodeName: "node1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if _, err := client.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := NewKube(client, "node1")
	defer k.Close()
	rec := &allocator.Record{PodNamespace: "shop", PodName: "web-0", PodUID: "uid-1"}
	if err := k.Event(ctx, reclaim.APIView{}, rec, "Normal", "AddressReclaimed", "m"); err != nil {
		t.Fatal(err)
	}
	gone := &allocator.Record{PodNamespace: "shop", PodName: "web-1", PodUID: "uid-2"}
	if err := k.Event(ctx, reclaim.APIView{}, gone, "Normal", "AddressReclaimed", "m"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ns := range []string{"shop", "default"} {
		l, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			got = append(got, e.Namespace+":"+e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name)
		}
	}
	if want := []string{"shop:Pod/web-0", "default:Node/node1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}
