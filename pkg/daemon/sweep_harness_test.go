package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

const testNet = "podnet"

type sweepEnv struct {
	t      *testing.T
	dir    string
	path   string
	netns  string
	ranges []allocator.StoredRangeSet
	cri    *fakeCRI
	client *fake.Clientset
	reg    *prometheus.Registry
	m      *Metrics
	s      *Sweeper
	now    time.Time
	logs   *bytes.Buffer
}

func newSweepEnv(t *testing.T, mods ...func(*Options)) *sweepEnv {
	t.Helper()
	dir := t.TempDir()
	netns := filepath.Join(dir, "netns")
	if err := os.Mkdir(netns, 0o755); err != nil {
		t.Fatal(err)
	}
	o := &Options{DataDir: dir, Interval: 30 * time.Second, Misses: 3, Grace: 2 * time.Minute, MinAge: 5 * time.Minute,
		NetnsGrace: 30 * time.Second, MaxReclaimFraction: 0.5, NetnsDir: netns, CRIEndpoint: "unix:///fake", LogFormat: "text"}
	for _, m := range mods {
		m(o)
	}
	e := &sweepEnv{t: t, dir: dir, path: store.FilePath(dir, testNet), netns: netns, ranges: testRanges,
		cri: newFakeCRI(), client: fake.NewClientset(), reg: prometheus.NewRegistry(), now: t0, logs: &bytes.Buffer{}}
	// The fake object tracker ignores generateName; the API server fills it in.
	var seq atomic.Int64
	e.client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		if ev.Name == "" {
			ev.Name = fmt.Sprintf("%s%d", ev.GenerateName, seq.Add(1))
		}
		return false, nil, nil
	})
	e.m = NewMetrics(e.reg)
	e.s = &Sweeper{Opts: o, CRI: e.cri, Kube: NewKube(e.client, "node1"), Metrics: e.m,
		Log: slog.New(slog.NewTextHandler(e.logs, nil)), Now: func() time.Time { return e.now },
		Boot: fixedBoot{t: t0.Add(-30 * 24 * time.Hour)}}
	return e
}

// fixedBoot is a node that booted at t (or whose boot time cannot be read).
type fixedBoot struct {
	t   time.Time
	err error
}

func (b fixedBoot) BootTime() (time.Time, error) { return b.t, b.err }

// alloc is a plugin ADD for sandbox id (pod default/<id>, UID uid-<id>) made
// at `at`; requested may name the address.
func (e *sweepEnv) alloc(id string, at time.Time, requested ...netip.Addr) *allocator.Record {
	e.t.Helper()
	recs, cerr := e.tryAlloc(allocator.Owner{ContainerID: id, IfName: "eth0", PodNamespace: "default", PodName: id, PodUID: "uid-" + id}, at, requested...)
	if cerr != nil {
		e.t.Fatalf("ADD %s: %v", id, cerr)
	}
	return recs[0]
}

func (e *sweepEnv) tryAlloc(owner allocator.Owner, at time.Time, requested ...netip.Addr) ([]*allocator.Record, *types.Error) {
	e.t.Helper()
	st, err := store.Open(e.path, store.OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	var recs []*allocator.Record
	var cerr *types.Error
	if err := st.Update(func(tx *store.Tx) error {
		recs, cerr = allocator.Allocate(tx, allocator.AllocateRequest{Network: testNet, RangeSets: e.ranges, Owner: owner, Requested: requested, Now: at})
		return nil // the plugin commits failures too (round-robin point, exhaustion count)
	}); err != nil {
		e.t.Fatalf("ADD transaction: %v", err)
	}
	return recs, cerr
}

// release is a plugin DEL.
func (e *sweepEnv) release(id string, at time.Time) {
	e.t.Helper()
	e.update(func(tx *store.Tx) error {
		_, err := allocator.Release(tx, allocator.Attachment{ContainerID: id, IfName: "eth0"}, allocator.Why{Reason: "CNI DEL", By: "plugin"}, at)
		return err
	})
}

func (e *sweepEnv) update(fn func(*store.Tx) error) {
	e.t.Helper()
	st, err := store.Open(e.path, store.OpenOptions{LockTimeout: time.Second})
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	if err := st.Update(fn); err != nil {
		e.t.Fatalf("update store: %v", err)
	}
}

func (e *sweepEnv) view(fn func(*store.Tx) error) {
	e.t.Helper()
	st, err := store.Open(e.path, store.OpenOptions{LockTimeout: time.Second, ReadOnly: true})
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	if err := st.View(fn); err != nil {
		e.t.Fatalf("read store: %v", err)
	}
}

// records is the store's content by address.
func (e *sweepEnv) records() map[netip.Addr]*allocator.Record {
	e.t.Helper()
	out := map[netip.Addr]*allocator.Record{}
	e.view(func(tx *store.Tx) error {
		return tx.ForEach(func(r *allocator.Record) error { out[r.IP] = r; return nil })
	})
	return out
}

func (e *sweepEnv) audit() []allocator.AuditEvent {
	e.t.Helper()
	var out []allocator.AuditEvent
	e.view(func(tx *store.Tx) error {
		var err error
		out, err = tx.AuditLog(1000)
		return err
	})
	return out
}

func (e *sweepEnv) reclaimAudits() []allocator.AuditEvent {
	var out []allocator.AuditEvent
	for _, ev := range e.audit() {
		if ev.Action == "reclaim" {
			out = append(out, ev)
		}
	}
	return out
}

// sweepAt runs one sweep with the daemon's clock at `at`.
func (e *sweepEnv) sweepAt(at time.Time) *SweepReport {
	e.t.Helper()
	e.now = at
	rep := e.s.Sweep(context.Background())
	if rep == nil {
		e.t.Fatal("Sweep returned nil")
	}
	return rep
}

func (e *sweepEnv) net(rep *SweepReport) *NetworkReport {
	e.t.Helper()
	for _, nr := range rep.Networks {
		if nr.Network == testNet {
			return nr
		}
	}
	e.t.Fatalf("sweep report has no network %s", testNet)
	return nil
}

func (e *sweepEnv) events() []corev1.Event {
	e.t.Helper()
	l, err := e.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Message < l.Items[j].Message })
	return l.Items
}

func (e *sweepEnv) addPod(name, uid string, phase corev1.PodPhase, ips ...netip.Addr) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: "node1"},
		Status:     corev1.PodStatus{Phase: phase},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0].String()
	}
	ctx := context.Background()
	// The daemon's view comes from an informer: wait until it has seen p.
	defer e.s.Kube.waitObserved(e.t, p)
	if _, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
		if _, err := e.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	if _, err := e.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// metric is the value of the series name{pairs} (label name, value, ...)
// in a scrape of the daemon's registry; the test fails when it is absent.
func (e *sweepEnv) metric(name string, pairs ...any) float64 {
	e.t.Helper()
	return gathered(e.t, e.reg, name, pairs...)
}

// reclaims is hostlease_reclaims_total{network=testNet, reason}.
func (e *sweepEnv) reclaims(reason reclaim.Reason) float64 {
	e.t.Helper()
	return e.metric("hostlease_reclaims_total", "network", testNet, "reason", reason)
}

// gathered is the value of the series name{pairs} that g gathers: a gauge's
// or counter's value, a histogram's sample count. The test fails when the
// series is absent.
func gathered(t *testing.T, g prometheus.Gatherer, name string, pairs ...any) float64 {
	t.Helper()
	v, ok := lookup(t, g, name, pairs...)
	if !ok {
		t.Fatalf("no series %s%v", name, pairs)
	}
	return v
}

func lookup(t *testing.T, g prometheus.Gatherer, name string, pairs ...any) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		want[fmt.Sprint(pairs[i])] = fmt.Sprint(pairs[i+1])
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// allocNetns is an ADD whose sandbox was given netns: the runtime created
// it, the plugin took its witness (allocator.WitnessNetns); a netns that does
// not exist now is removed again after the ADD (the runtime tore it down).
// A netns whose directory does not exist gets no witness.
func (e *sweepEnv) allocNetns(id string, at time.Time, netns string) *allocator.Record {
	e.t.Helper()
	if _, err := os.Lstat(netns); os.IsNotExist(err) {
		if err := os.WriteFile(netns, nil, 0o644); err == nil {
			defer os.Remove(netns)
		}
	}
	recs, cerr := e.tryAlloc(allocator.Owner{ContainerID: id, IfName: "eth0", Netns: netns, NetnsWitness: allocator.WitnessNetns(netns),
		PodNamespace: "default", PodName: id, PodUID: "uid-" + id}, at)
	if cerr != nil {
		e.t.Fatal(cerr)
	}
	return recs[0]
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys(m map[netip.Addr]*allocator.Record) []string {
	var out []string
	for ip, r := range m {
		out = append(out, ip.String()+"="+r.ContainerID)
	}
	sort.Strings(out)
	return out
}

// writeHostLocal writes host-local's state for testNet in e's host-local
// dir: its lock file (host-local leaves it on every call, DEL included) and
// one reservation file "ctr-<ip>\r\neth0" per address. It returns the dir.
func writeHostLocal(t *testing.T, e *sweepEnv, ips ...string) string {
	t.Helper()
	hl := e.s.hostLocalDir(testNet)
	if err := os.MkdirAll(hl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hl+"/lock", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		if err := os.WriteFile(hl+"/"+ip, []byte("ctr-"+ip+"\r\neth0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hl
}
