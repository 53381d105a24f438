package gc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// fakeCRI is an in-process runtime: a sandbox list the test edits, and a hook
// that runs inside ListSandboxes (to model what happens while the daemon waits
// for the runtime's answer).
type fakeCRI struct {
	mu        sync.Mutex
	order     []string
	sandboxes map[string]CRISandbox
	ips       map[string][]netip.Addr
	listErr   error
	onList    func()
	lists     atomic.Int64
	statuses  atomic.Int64
}

func newFakeCRI() *fakeCRI {
	return &fakeCRI{sandboxes: map[string]CRISandbox{}, ips: map[string][]netip.Addr{}}
}

// set adds or replaces a sandbox; its pod metadata is derived from the ID the
// same way the sweepEnv's allocations derive it.
func (f *fakeCRI) set(id, state string, ips ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok {
		f.order = append(f.order, id)
	}
	f.sandboxes[id] = CRISandbox{ID: id, State: state, PodNamespace: "default", PodName: id, PodUID: "uid-" + id}
	f.ips[id] = ips
}

func (f *fakeCRI) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
	delete(f.ips, id)
}

func (f *fakeCRI) setListErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listErr = err
}

func (f *fakeCRI) setOnList(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onList = fn
}

func (f *fakeCRI) ListSandboxes(ctx context.Context) ([]CRISandbox, error) {
	f.lists.Add(1)
	f.mu.Lock()
	hook := f.onList
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	out := []CRISandbox{}
	for _, id := range f.order {
		if sb, ok := f.sandboxes[id]; ok {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (f *fakeCRI) SandboxIPs(ctx context.Context, id string) ([]netip.Addr, error) {
	f.statuses.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok {
		return nil, fmt.Errorf("sandbox %s not found", id)
	}
	return append([]netip.Addr(nil), f.ips[id]...), nil
}

func (f *fakeCRI) Close() error { return nil }

const testNet = "podnet"

// testRanges is one range set, 10.1.0.10-10.1.0.200 (191 addresses).
var testRanges = []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
	Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: netip.MustParseAddr("10.1.0.10"),
	End: netip.MustParseAddr("10.1.0.200"), Gateway: netip.MustParseAddr("10.1.0.1"),
}}}}

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
		_, err := allocator.Release(tx, id, "eth0", allocator.Why{Reason: "CNI DEL", By: "plugin"}, at)
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

func (e *sweepEnv) metric(c prometheus.Collector) float64 {
	e.t.Helper()
	return testutil.ToFloat64(c)
}

func (e *sweepEnv) reclaims(reason string) float64 {
	return e.metric(e.m.Reclaims.WithLabelValues(testNet, reason))
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestSweepReclaimsLeaksAfterMisses(t *testing.T) {
	e := newSweepEnv(t, func(o *Options) { o.MaxReclaimFraction = 1 }) // 2 of 3 records leak
	created := t0.Add(-time.Hour)
	live := e.alloc("sb-live", created)
	leakPod := e.alloc("web-0", created)  // its pod still exists (kubelet retries with a new sandbox)
	leakGone := e.alloc("job-1", created) // its pod is gone
	e.cri.set("sb-live", SandboxReady, live.IP)
	e.addPod("web-0", "uid-web-0", corev1.PodPending) // retrying: no address yet

	for i := range 2 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if rep.Result != SweepOK || !rep.CRI.Complete {
			t.Fatalf("sweep %d: result %s, CRI %+v", i+1, rep.Result, rep.CRI)
		}
		if n := len(e.net(rep).Reclaimed); n != 0 {
			t.Fatalf("sweep %d reclaimed %d addresses before --misses sweeps", i+1, n)
		}
		recs := e.records()
		for _, ip := range []netip.Addr{leakPod.IP, leakGone.IP} {
			r := recs[ip]
			if r == nil {
				t.Fatalf("sweep %d: leak %s gone early", i+1, ip)
			}
			if r.Obs.Misses != i+1 || r.Obs.SandboxState != SandboxAbsent || !r.Obs.FirstMissed.Equal(t0) || r.Obs.Verdict != "absent" {
				t.Fatalf("sweep %d: stored observation of %s = %+v, want %d misses since %v", i+1, ip, r.Obs, i+1, t0)
			}
		}
		if got := e.metric(e.m.LeakCandidates.WithLabelValues(testNet)); got != 2 {
			t.Fatalf("sweep %d: leak candidates %v, want 2", i+1, got)
		}
		if evs := e.events(); len(evs) != 0 {
			t.Fatalf("sweep %d posted events before reclaiming: %+v", i+1, evs)
		}
	}

	rep := e.sweepAt(t0.Add(2 * time.Minute)) // third miss, absent for the 2m grace
	nr := e.net(rep)
	if len(nr.Reclaimed) != 2 || nr.Err != nil {
		t.Fatalf("third sweep reclaimed %d (err %v), want the 2 leaks; decisions %+v", len(nr.Reclaimed), nr.Err, nr.Verdict.Decisions)
	}
	recs := e.records()
	if len(recs) != 1 || recs[live.IP] == nil {
		t.Fatalf("store after reclaim holds %v, want only the live %s", recs, live.IP)
	}
	if r := recs[live.IP]; r.State != allocator.StateCommitted || r.Obs.SandboxState != SandboxReady || r.Obs.Misses != 0 {
		t.Fatalf("live record %+v, want committed and READY", r)
	}

	audits := e.reclaimAudits()
	if len(audits) != 2 {
		t.Fatalf("audit log has %d reclaims, want 2: %+v", len(audits), e.audit())
	}
	byIP := map[netip.Addr]allocator.AuditEvent{}
	for _, a := range audits {
		byIP[a.IP] = a
		if a.By != "hostlease-gc" || !strings.HasPrefix(a.Reason, ReclaimSandboxAbsent+": ") || !a.Time.Equal(t0.Add(2*time.Minute)) || a.IfName != "eth0" {
			t.Errorf("audit entry %+v: want by hostlease-gc, reason sandbox_absent with detail, time of the sweep", a)
		}
	}
	if a := byIP[leakPod.IP]; a.ContainerID != "web-0" || a.Pod != "default/web-0" {
		t.Errorf("audit entry for %s: %+v", leakPod.IP, a)
	}
	if a := byIP[leakGone.IP]; a.ContainerID != "job-1" || a.Pod != "default/job-1" {
		t.Errorf("audit entry for %s: %+v", leakGone.IP, a)
	}

	evs := e.events()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Reason != "AddressReclaimed" || ev.Type != corev1.EventTypeNormal || ev.Source.Component != "hostlease-gc" || ev.Source.Host != "node1" {
			t.Errorf("event %+v", ev)
		}
		switch {
		case strings.Contains(ev.Message, leakPod.IP.String()+" "):
			o := ev.InvolvedObject
			if o.Kind != "Pod" || o.Name != "web-0" || o.Namespace != "default" || o.UID != "uid-web-0" || ev.Namespace != "default" {
				t.Errorf("event for the leak of a live pod is on %+v (ns %s), want the pod", o, ev.Namespace)
			}
		case strings.Contains(ev.Message, leakGone.IP.String()+" "):
			if o := ev.InvolvedObject; o.Kind != "Node" || o.Name != "node1" {
				t.Errorf("event for the leak of a gone pod is on %+v, want node node1", o)
			}
		default:
			t.Errorf("event names neither leak: %q", ev.Message)
		}
		if !strings.Contains(ev.Message, testNet) {
			t.Errorf("event message %q does not name the network", ev.Message)
		}
	}

	// Metrics after the reclaim.
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"reclaims sandbox_absent", e.m.Reclaims.WithLabelValues(testNet, ReclaimSandboxAbsent), 2},
		{"reclaims netns_gone", e.m.Reclaims.WithLabelValues(testNet, ReclaimNetnsGone), 0},
		{"leak candidates", e.m.LeakCandidates.WithLabelValues(testNet), 0},
		{"allocations committed", e.m.Allocations.WithLabelValues(testNet, StateCommitted), 1},
		{"allocations pending", e.m.Allocations.WithLabelValues(testNet, StatePending), 0},
		{"pool size", e.m.PoolSize.WithLabelValues(testNet, "0"), 191},
		{"pool free", e.m.PoolFree.WithLabelValues(testNet, "0"), 190},
		{"sweeps ok", e.m.Sweeps.WithLabelValues(SweepOK), 3},
		{"sweeps cri_error", e.m.Sweeps.WithLabelValues(SweepCRIError), 0},
		{"cri up", e.m.CRIUp, 1},
		{"vetoes", e.m.Vetoes.WithLabelValues(testNet, VetoPodListsIP), 0},
	}
	for _, c := range checks {
		if got := e.metric(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if ts := e.metric(e.m.LastSuccessfulSweep); ts <= 0 {
		t.Errorf("last successful sweep timestamp %v", ts)
	}

	// Nothing is reclaimed or counted twice; the freed addresses serve ADDs.
	e.sweepAt(t0.Add(3 * time.Minute))
	if got := e.reclaims(ReclaimSandboxAbsent); got != 2 || len(e.reclaimAudits()) != 2 || len(e.events()) != 2 {
		t.Fatalf("after a further sweep: reclaims %v, audits %d, events %d; want 2 each", got, len(e.reclaimAudits()), len(e.events()))
	}
	e.alloc("web-0-retry", t0.Add(4*time.Minute), leakPod.IP)
}

func TestSweepNetnsGone(t *testing.T) {
	e := newSweepEnv(t)
	start := t0
	young := start.Add(-10 * time.Second)
	gone := e.allocNetns("sb-gone", young, filepath.Join(e.netns, "cni-gone"))
	present := filepath.Join(e.netns, "cni-present")
	if err := os.WriteFile(present, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inflight := e.allocNetns("sb-inflight", young, present)
	// A netns path outside --netns-dir proves nothing.
	outside := e.allocNetns("sb-outside", young, filepath.Join(t.TempDir(), "ns"))

	var reclaimedAt []int
	for i := range 10 { // every 15s for 2m15s: past --grace, well below --min-age
		rep := e.sweepAt(start.Add(time.Duration(i) * 15 * time.Second))
		for _, r := range e.net(rep).Reclaimed {
			if r.IP != gone.IP {
				t.Fatalf("sweep %d reclaimed %s (%s) whose netns is not provably gone", i, r.IP, r.ContainerID)
			}
			reclaimedAt = append(reclaimedAt, i)
		}
	}
	// Misses: sweep index 2 (3rd); netns grace 30s from the first miss: index 2.
	if len(reclaimedAt) != 1 || reclaimedAt[0] != 2 {
		t.Fatalf("netns-gone leak reclaimed at sweeps %v, want [2]", reclaimedAt)
	}
	recs := e.records()
	if recs[gone.IP] != nil || recs[inflight.IP] == nil || recs[outside.IP] == nil {
		t.Fatalf("store after sweeps: %v", recs)
	}
	if v := recs[inflight.IP].Obs.Verdict; v != "in_flight" {
		t.Errorf("record with a present netns: verdict %q, want in_flight", v)
	}
	if got := e.reclaims(ReclaimNetnsGone); got != 1 {
		t.Errorf("reclaims{netns_gone} = %v, want 1", got)
	}
	if got := e.reclaims(ReclaimSandboxAbsent); got != 0 {
		t.Errorf("reclaims{sandbox_absent} = %v, want 0", got)
	}

	// Without the netns dir (a missing mount) no netns counts as gone.
	e2 := newSweepEnv(t, func(o *Options) { o.NetnsDir = filepath.Join(t.TempDir(), "not-mounted") })
	r := e2.allocNetns("sb-x", young, filepath.Join(e2.s.Opts.NetnsDir, "cni-x"))
	for i := range 8 {
		if rep := e2.sweepAt(start.Add(time.Duration(i) * 15 * time.Second)); len(e2.net(rep).Reclaimed) > 0 {
			t.Fatalf("sweep %d reclaimed %s although the netns dir is not visible", i, r.IP)
		}
	}
}

func (e *sweepEnv) allocNetns(id string, at time.Time, netns string) *allocator.Record {
	e.t.Helper()
	recs, cerr := e.tryAlloc(allocator.Owner{ContainerID: id, IfName: "eth0", Netns: netns, PodNamespace: "default", PodName: id, PodUID: "uid-" + id}, at)
	if cerr != nil {
		e.t.Fatal(cerr)
	}
	return recs[0]
}

func TestSweepVetoKeepsAddressAPodShows(t *testing.T) {
	e := newSweepEnv(t)
	leak := e.alloc("web-0", t0.Add(-time.Hour))
	e.addPod("web-0", "uid-web-0", corev1.PodRunning, leak.IP)

	for i := range 5 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if n := len(e.net(rep).Reclaimed); n != 0 {
			t.Fatalf("sweep %d reclaimed an address a running pod lists", i)
		}
	}
	r := e.records()[leak.IP]
	if r == nil || r.Obs.Verdict != "vetoed" {
		t.Fatalf("vetoed record %+v, want kept with verdict vetoed", r)
	}
	// Sweeps 3, 4 and 5 were due and vetoed.
	if got := e.metric(e.m.Vetoes.WithLabelValues(testNet, VetoPodListsIP)); got != 3 {
		t.Fatalf("vetoes{pod_lists_ip} = %v, want 3", got)
	}
	if got := e.reclaims(ReclaimSandboxAbsent); got != 0 || len(e.events()) != 0 || len(e.reclaimAudits()) != 0 {
		t.Fatalf("vetoed record: reclaims %v, events %d, audits %d", got, len(e.events()), len(e.reclaimAudits()))
	}

	// The pod completes: its address is no longer in use.
	e.addPod("web-0", "uid-web-0", corev1.PodSucceeded, leak.IP)
	rep := e.sweepAt(t0.Add(5 * time.Minute))
	if n := len(e.net(rep).Reclaimed); n != 1 {
		t.Fatalf("after the pod terminated, reclaimed %d, want 1 (%+v)", n, e.net(rep).Verdict.Decisions)
	}
	if evs := e.events(); len(evs) != 1 || evs[0].InvolvedObject.Kind != "Pod" || evs[0].InvolvedObject.Name != "web-0" {
		t.Fatalf("events %+v, want one on pod web-0", evs)
	}
	if got := e.metric(e.m.Vetoes.WithLabelValues(testNet, VetoPodListsIP)); got != 3 {
		t.Fatalf("vetoes{pod_lists_ip} = %v after the reclaim, want still 3", got)
	}
}

func TestSweepAPIUnavailableReclaimsNothing(t *testing.T) {
	e := newSweepEnv(t)
	leak := e.alloc("web-0", t0.Add(-time.Hour))
	e.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	for i := range 6 {
		if rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute)); len(e.net(rep).Reclaimed) != 0 {
			t.Fatalf("sweep %d reclaimed while the API server could not be read", i)
		}
	}
	if r := e.records()[leak.IP]; r == nil || r.Obs.Verdict != "api_unavailable" {
		t.Fatalf("record %+v, want kept with verdict api_unavailable", r)
	}
	// Without an API server at all (--no-api) the same leak is reclaimed.
	e.s.Kube = nil
	if rep := e.sweepAt(t0.Add(6 * time.Minute)); len(e.net(rep).Reclaimed) != 1 {
		t.Fatalf("with --no-api the leak was not reclaimed")
	}
}

func TestSweepCRIFailureReclaimsNothing(t *testing.T) {
	e := newSweepEnv(t)
	leak := e.alloc("job-1", t0.Add(-time.Hour))
	live := e.alloc("sb-live", t0.Add(-time.Hour))
	e.cri.set("sb-live", SandboxReady, live.IP)
	e.sweepAt(t0)
	e.sweepAt(t0.Add(time.Minute)) // two misses so far

	e.cri.setListErr(errors.New("rpc error: code = Unavailable"))
	for i := range 5 {
		rep := e.sweepAt(t0.Add(time.Duration(2+i) * time.Minute))
		if rep.Result != SweepCRIError || rep.CRI.Complete || len(e.net(rep).Reclaimed) != 0 {
			t.Fatalf("CRI down: result %s complete %v reclaimed %d", rep.Result, rep.CRI.Complete, len(e.net(rep).Reclaimed))
		}
	}
	if r := e.records()[leak.IP]; r == nil || r.Obs.Misses != 2 || r.Obs.Verdict != "cri_unavailable" {
		t.Fatalf("leak during a CRI outage: %+v, want kept with its 2 misses", r)
	}
	if got := e.metric(e.m.CRIUp); got != 0 {
		t.Errorf("cri_up = %v during the outage", got)
	}
	if got := e.metric(e.m.Sweeps.WithLabelValues(SweepCRIError)); got != 5 {
		t.Errorf("sweeps{cri_error} = %v, want 5", got)
	}

	// The runtime restarts and briefly lists nothing: implausible while a
	// committed allocation exists, so still nothing is reclaimed.
	e.cri.setListErr(nil)
	e.cri.remove("sb-live")
	rep := e.sweepAt(t0.Add(10 * time.Minute))
	if rep.Result != SweepCRIError || len(e.net(rep).Reclaimed) != 0 || len(e.records()) != 2 {
		t.Fatalf("empty CRI list: result %s reclaimed %d", rep.Result, len(e.net(rep).Reclaimed))
	}

	e.cri.set("sb-live", SandboxReady, live.IP)
	rep = e.sweepAt(t0.Add(11 * time.Minute))
	if rep.Result != SweepOK || len(e.net(rep).Reclaimed) != 1 || e.net(rep).Reclaimed[0].IP != leak.IP {
		t.Fatalf("first good sweep after the outage: result %s reclaimed %v, want the leak", rep.Result, e.net(rep).Reclaimed)
	}
	if got := e.metric(e.m.CRIUp); got != 1 {
		t.Errorf("cri_up = %v after recovery", got)
	}
	if got := e.metric(e.m.Sweeps.WithLabelValues(SweepOK)); got != 3 {
		t.Errorf("sweeps{ok} = %v, want 3", got)
	}
}

// The sweeper reads the stores before it lists CRI. An ADD that commits while
// the list is being taken (its sandbox may or may not be in the answer) is not
// in the snapshot, so this sweep cannot judge it absent.
func TestSweepRecordCommittedDuringCRIList(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sandbox listed=%v", listed), func(t *testing.T) {
			// The most eager policy: one miss, no grace, no minimum age.
			e := newSweepEnv(t, func(o *Options) { o.Misses, o.Grace, o.MinAge = 1, 0, 0 })
			live := e.alloc("sb-live", t0.Add(-time.Hour))
			e.cri.set("sb-live", SandboxReady, live.IP)
			e.sweepAt(t0)
			id := "sb-racing"
			var rec *allocator.Record
			e.cri.setOnList(func() {
				// The plugin took its timestamp before the daemon asked CRI,
				// and commits while CRI answers.
				rec = e.alloc(id, e.now.Add(-time.Second))
				if listed {
					e.cri.set(id, SandboxReady, rec.IP)
				}
			})
			rep := e.sweepAt(e.now.Add(time.Minute))
			e.cri.setOnList(nil)
			if n := len(e.net(rep).Reclaimed); n != 0 {
				t.Fatalf("reclaimed %d addresses of an ADD that landed during the CRI list", n)
			}
			r := e.records()[rec.IP]
			if r == nil || r.ContainerID != id {
				t.Fatalf("record of the racing ADD: %+v", r)
			}
			if r.Obs != (allocator.Observation{}) {
				t.Fatalf("racing ADD's record was judged on a snapshot that did not hold it: %+v", r.Obs)
			}
		})
	}
}

// A record released and re-allocated between the sweep's snapshot and its
// write is a new allocation and must be left alone.
func TestSweepLeavesReallocatedAddress(t *testing.T) {
	cases := []struct {
		name  string
		newID string // the container that re-allocates the address
	}{
		{"another container", "sb-new"},
		{"the same container after DEL and ADD", "sb-old"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newSweepEnv(t)
			old := e.alloc("sb-old", t0.Add(-time.Hour))
			// Due at the next sweep: two misses over five minutes already.
			e.update(func(tx *store.Tx) error {
				r, _ := tx.Get(old.IP)
				r.Obs = allocator.Observation{Misses: 2, FirstMissed: t0.Add(-5 * time.Minute), SandboxState: SandboxAbsent}
				return tx.Put(r)
			})
			e.cri.setOnList(func() {
				e.release("sb-old", t0.Add(-time.Second))
				e.alloc(tc.newID, t0.Add(-time.Millisecond), old.IP)
			})
			rep := e.sweepAt(t0)
			nr := e.net(rep)
			var d Decision
			for _, x := range nr.Verdict.Decisions {
				if x.Record.IP == old.IP {
					d = x
				}
			}
			if d.Action != Reclaim {
				t.Fatalf("precondition: the snapshot's record should be due (got %v %q)", d.Action, d.Reason)
			}
			if len(nr.Reclaimed) != 0 || nr.Err != nil {
				t.Fatalf("reclaimed %v (err %v): the re-allocated address was released", nr.Reclaimed, nr.Err)
			}
			r := e.records()[old.IP]
			if r == nil || r.ContainerID != tc.newID || !r.Created.Equal(t0.Add(-time.Millisecond)) || r.State != allocator.StatePending {
				t.Fatalf("record now %+v, want the new allocation", r)
			}
			if r.Obs != (allocator.Observation{}) {
				t.Fatalf("the new allocation got the old one's observation: %+v", r.Obs)
			}
			if len(e.reclaimAudits()) != 0 || len(e.events()) != 0 || e.reclaims(ReclaimSandboxAbsent) != 0 {
				t.Fatalf("a reclaim was recorded: audits %+v events %d", e.reclaimAudits(), len(e.events()))
			}
		})
	}
}

func TestSweepCommitsPendingRecords(t *testing.T) {
	e := newSweepEnv(t)
	at := t0.Add(-time.Minute)
	ready := e.alloc("sb-ready", at)
	other := e.alloc("sb-other", at) // READY, but CRI reports another address
	notReady := e.alloc("sb-notready", at)
	e.cri.set("sb-ready", SandboxReady, addr("10.9.9.9"), ready.IP)
	e.cri.set("sb-other", SandboxReady, addr("10.9.9.10"))
	e.cri.set("sb-notready", SandboxNotReady, notReady.IP)

	now := t0
	rep := e.sweepAt(now)
	if got := e.net(rep).Committed; got != 1 {
		t.Fatalf("sweep committed %d, want 1", got)
	}
	recs := e.records()
	if r := recs[ready.IP]; r.State != allocator.StateCommitted || !r.Committed.Equal(now) || r.Obs.SandboxState != SandboxReady {
		t.Fatalf("READY sandbox with the address: %+v, want committed at %v", r, now)
	}
	if r := recs[other.IP]; r.State != allocator.StatePending {
		t.Fatalf("READY sandbox without the address: state %s, want pending", r.State)
	}
	if r := recs[notReady.IP]; r.State != allocator.StatePending || r.Obs.SandboxState != SandboxNotReady || r.Obs.Verdict != "stale" {
		t.Fatalf("NOTREADY sandbox: %+v, want pending and stale", r)
	}
	if c, p := e.metric(e.m.Allocations.WithLabelValues(testNet, StateCommitted)), e.metric(e.m.Allocations.WithLabelValues(testNet, StatePending)); c != 1 || p != 2 {
		t.Fatalf("allocations committed=%v pending=%v, want 1 and 2", c, p)
	}
	// A committed record needs no status call on later sweeps.
	before := e.cri.statuses.Load()
	e.sweepAt(now.Add(time.Minute))
	if got := e.cri.statuses.Load() - before; got != 1 {
		t.Errorf("second sweep made %d PodSandboxStatus calls, want 1 (only the still-pending READY sandbox)", got)
	}
	if r := e.records()[ready.IP]; !r.Committed.Equal(now) {
		t.Errorf("commit time moved to %v", r.Committed)
	}
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSweepDryRunChangesNothing(t *testing.T) {
	e := newSweepEnv(t, func(o *Options) { o.DryRun = true })
	created := t0.Add(-time.Hour)
	leak := e.alloc("job-1", created)
	pend := e.alloc("sb-ready", created)
	e.cri.set("sb-ready", SandboxReady, pend.IP)
	// A second network whose store is unreadable.
	badPath := store.FilePath(e.dir, "broken")
	if err := os.WriteFile(badPath, bytes.Repeat([]byte("garbage!"), 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	before, badBefore := fileBytes(t, e.path), fileBytes(t, badPath)
	entriesBefore, _ := os.ReadDir(e.dir)

	var wouldAt []int
	for i := range 5 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		nr := e.net(rep)
		if len(nr.Reclaimed) != 0 || nr.Committed != 0 {
			t.Fatalf("dry-run sweep %d reclaimed %d, committed %d", i, len(nr.Reclaimed), nr.Committed)
		}
		for _, d := range nr.Verdict.Decisions {
			if d.Record.IP == leak.IP && d.Action == Reclaim {
				wouldAt = append(wouldAt, i)
			}
		}
	}
	// What a real daemon would do at sweep 3 is reported from then on.
	if len(wouldAt) == 0 || wouldAt[0] != 2 {
		t.Fatalf("dry run reported the leak as reclaimable at sweeps %v, want from sweep 2 (the third) on", wouldAt)
	}
	if !strings.Contains(e.logs.String(), "would reclaim address (dry run)") || !strings.Contains(e.logs.String(), leak.IP.String()) {
		t.Errorf("dry run did not log what it would reclaim:\n%s", e.logs.String())
	}
	if !bytes.Equal(fileBytes(t, e.path), before) {
		t.Fatal("dry run modified the store")
	}
	if !bytes.Equal(fileBytes(t, badPath), badBefore) {
		t.Fatal("dry run modified the unreadable store")
	}
	if entries, _ := os.ReadDir(e.dir); len(entries) != len(entriesBefore) {
		t.Fatalf("dry run created or removed files: %v -> %v", entriesBefore, entries)
	}
	if len(e.events()) != 0 || e.reclaims(ReclaimSandboxAbsent) != 0 || e.metric(e.m.StoresRebuilt.WithLabelValues("broken")) != 0 {
		t.Fatalf("dry run posted events (%d) or counted reclaims/rebuilds", len(e.events()))
	}
	if got := e.metric(e.m.Allocations.WithLabelValues(testNet, StatePending)); got != 2 {
		t.Errorf("dry run: allocations{pending} = %v, want 2 (nothing was committed)", got)
	}
	if got := e.metric(e.m.LeakCandidates.WithLabelValues(testNet)); got != 1 {
		t.Errorf("dry run: leak candidates = %v, want 1", got)
	}
}

func TestSweepRebuildsUnreadableStore(t *testing.T) {
	small := []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: addr("10.1.0.10"), End: addr("10.1.0.13"), Gateway: addr("10.1.0.1"),
	}}}}
	corruptions := []struct {
		name string
		do   func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			b := fileBytes(t, path)
			for i := range b {
				b[i] = byte(i*7 + 3)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			// The meta pages survive; the pages they point at do not.
			if err := os.Truncate(path, 3*4096); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			e := newSweepEnv(t)
			e.ranges = small
			created := t0.Add(-time.Hour)
			a := e.alloc("sb-a", created)  // .10 READY
			e.alloc("sb-b", created)       // .11 leaked: its sandbox is gone
			cc := e.alloc("sb-c", created) // .12 READY
			d := e.alloc("sb-d", created)  // .13 NOTREADY
			e.cri.set("sb-a", SandboxReady, a.IP)
			e.cri.set("sb-c", SandboxReady, cc.IP, addr("fd00::c")) // plus an address of another network
			e.cri.set("sb-d", SandboxNotReady, d.IP)
			e.cri.set("sb-x", SandboxReady, addr("192.168.7.7")) // a pod on another network
			if rep := e.sweepAt(t0); rep.Result != SweepOK {
				t.Fatalf("first sweep: %s", rep.Result)
			}

			c.do(t, e.path)
			damaged := fileBytes(t, e.path)
			now := t0.Add(time.Minute)
			rep := e.sweepAt(now)
			nr := e.net(rep)
			aside := fmt.Sprintf("%s.corrupt-%d", e.path, now.Unix())
			if nr.Rebuilt != aside || nr.Err != nil {
				t.Fatalf("rebuilt=%q err=%v, want set aside as %s", nr.Rebuilt, nr.Err, aside)
			}
			if !bytes.Equal(fileBytes(t, aside), damaged) {
				t.Fatal("the set-aside file is not the unreadable store as it was")
			}
			recs := e.records()
			if len(recs) != 3 || recs[a.IP] == nil || recs[cc.IP] == nil || recs[d.IP] == nil {
				t.Fatalf("rebuilt store holds %v, want exactly the READY sandboxes' %s and %s and the NOTREADY one's %s", keys(recs), a.IP, cc.IP, d.IP)
			}
			for _, r := range recs {
				if r.State != allocator.StateCommitted || r.Source != "rebuild" || r.RangeSet != 0 || r.PodUID != "uid-"+r.ContainerID ||
					r.PrefixLen != 24 || r.Gateway != addr("10.1.0.1") {
					t.Errorf("rebuilt record %+v", r)
				}
			}
			if recs[a.IP].ContainerID != "sb-a" || recs[cc.IP].ContainerID != "sb-c" {
				t.Errorf("rebuilt owners: %s=%s %s=%s", a.IP, recs[a.IP].ContainerID, cc.IP, recs[cc.IP].ContainerID)
			}
			var sawRebuild bool
			for _, ev := range e.audit() {
				sawRebuild = sawRebuild || ev.Action == "rebuild"
			}
			if !sawRebuild {
				t.Error("no rebuild entry in the new store's audit log")
			}
			if got := e.metric(e.m.StoresRebuilt.WithLabelValues(testNet)); got != 1 {
				t.Errorf("stores_rebuilt_total = %v, want 1", got)
			}
			if got := e.metric(e.m.PoolSize.WithLabelValues(testNet, "0")); got != 4 {
				t.Errorf("pool size after rebuild = %v, want 4 (the cached range set)", got)
			}

			// The plugin serves from the rebuilt store: it must never hand out
			// an address a READY sandbox holds (.10, .12) nor the one the
			// NOTREADY sandbox still reports (.13: its pod is stopped, not
			// gone). Only the leaked .11 is free again.
			owner := func(id string) allocator.Owner { return allocator.Owner{ContainerID: id, IfName: "eth0"} }
			inUse := map[netip.Addr]bool{a.IP: true, cc.IP: true, d.IP: true}
			got := map[netip.Addr]bool{}
			for i := range 2 {
				recs, cerr := e.tryAlloc(owner(fmt.Sprintf("new-%d", i)), now)
				if cerr != nil {
					if cerr.Code != allocator.ErrRangeExhausted || i != 1 {
						t.Fatalf("ADD %d on the rebuilt store: %v", i, cerr)
					}
					break
				}
				if inUse[recs[0].IP] || got[recs[0].IP] {
					t.Fatalf("ADD %d on the rebuilt store got %s, which is in use", i, recs[0].IP)
				}
				got[recs[0].IP] = true
			}
			if len(got) != 1 {
				t.Fatalf("ADDs on the rebuilt store got %v, want the one free address", got)
			}
			// And the daemon keeps sweeping the rebuilt store normally.
			if rep := e.sweepAt(now.Add(time.Minute)); rep.Result != SweepOK || e.net(rep).Rebuilt != "" {
				t.Fatalf("sweep after rebuild: %s rebuilt %q", rep.Result, e.net(rep).Rebuilt)
			}
		})
	}

	t.Run("not without a complete CRI answer", func(t *testing.T) {
		e := newSweepEnv(t)
		a := e.alloc("sb-a", t0.Add(-time.Hour))
		e.cri.set("sb-a", SandboxReady, a.IP)
		e.sweepAt(t0)
		if err := os.Truncate(e.path, 0); err != nil {
			t.Fatal(err)
		}
		e.cri.setListErr(errors.New("unavailable"))
		rep := e.sweepAt(t0.Add(time.Minute))
		if nr := e.net(rep); nr.Rebuilt != "" || !errors.Is(nr.Err, store.ErrUnreadable) {
			t.Fatalf("rebuilt=%q err=%v, want left unreadable", nr.Rebuilt, nr.Err)
		}
		if matches, _ := filepath.Glob(e.path + ".corrupt-*"); len(matches) != 0 {
			t.Fatalf("set aside without a CRI answer: %v", matches)
		}
		if fi, err := os.Stat(e.path); err != nil || fi.Size() != 0 {
			t.Fatalf("unreadable store was touched: %v %v", fi, err)
		}
		// CRI is back: rebuilt now.
		e.cri.setListErr(nil)
		if rep := e.sweepAt(t0.Add(2 * time.Minute)); e.net(rep).Rebuilt == "" {
			t.Fatalf("not rebuilt once CRI answered: %v", e.net(rep).Err)
		}
		if recs := e.records(); len(recs) != 1 || recs[a.IP] == nil {
			t.Fatalf("rebuilt store %v", keys(recs))
		}
	})
}

func keys(m map[netip.Addr]*allocator.Record) []string {
	var out []string
	for ip, r := range m {
		out = append(out, ip.String()+"="+r.ContainerID)
	}
	sort.Strings(out)
	return out
}

func TestSweepMetricsExhaustionAndResults(t *testing.T) {
	e := newSweepEnv(t)
	e.ranges = []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: addr("10.1.0.10"), End: addr("10.1.0.12"),
	}}}}
	created := t0.Add(-time.Hour)
	for _, id := range []string{"a", "b", "c"} {
		r := e.alloc(id, created)
		e.cri.set(id, SandboxReady, r.IP)
	}
	failADD := func(at time.Time) {
		t.Helper()
		if _, cerr := e.tryAlloc(allocator.Owner{ContainerID: "sb-fail", IfName: "eth0"}, at); cerr == nil || cerr.Code != allocator.ErrRangeExhausted {
			t.Fatalf("ADD on a full pool: %v, want exhaustion", cerr)
		}
	}
	failures := func() float64 {
		return e.metric(e.m.AllocationFailures.WithLabelValues(testNet, "0", FailureExhausted))
	}
	lastExh := func() float64 { return e.metric(e.m.LastExhaustion.WithLabelValues(testNet, "0")) }

	e.sweepAt(t0)
	if got := failures(); got != 0 {
		t.Fatalf("failures before any = %v", got)
	}
	if s, f := e.metric(e.m.PoolSize.WithLabelValues(testNet, "0")), e.metric(e.m.PoolFree.WithLabelValues(testNet, "0")); s != 3 || f != 0 {
		t.Fatalf("pool size/free = %v/%v, want 3/0", s, f)
	}

	failADD(t0.Add(10 * time.Second))
	failADD(t0.Add(20 * time.Second))
	e.sweepAt(t0.Add(time.Minute))
	if got := failures(); got != 2 {
		t.Fatalf("failures after two exhausted ADDs = %v, want 2", got)
	}
	if got, want := lastExh(), float64(t0.Add(20*time.Second).Unix()); got != want {
		t.Fatalf("last exhaustion = %v, want %v", got, want)
	}
	// The store's count is cumulative: sweeps without new failures add nothing.
	e.sweepAt(t0.Add(2 * time.Minute))
	e.sweepAt(t0.Add(3 * time.Minute))
	if got := failures(); got != 2 {
		t.Fatalf("failures after quiet sweeps = %v, want still 2 (double counted)", got)
	}
	failADD(t0.Add(200 * time.Second))
	e.sweepAt(t0.Add(4 * time.Minute))
	if got := failures(); got != 3 {
		t.Fatalf("failures after a third exhausted ADD = %v, want 3", got)
	}

	// A pod goes away: its address becomes a leak candidate, then free.
	e.cri.remove("c")
	e.sweepAt(t0.Add(5 * time.Minute))
	if got := e.metric(e.m.LeakCandidates.WithLabelValues(testNet)); got != 1 {
		t.Fatalf("leak candidates = %v, want 1", got)
	}
	e.sweepAt(t0.Add(6 * time.Minute))
	e.sweepAt(t0.Add(7 * time.Minute))
	if lc, free, rec := e.metric(e.m.LeakCandidates.WithLabelValues(testNet)), e.metric(e.m.PoolFree.WithLabelValues(testNet, "0")), e.reclaims(ReclaimSandboxAbsent); lc != 0 || free != 1 || rec != 1 {
		t.Fatalf("after the reclaim: leak candidates %v free %v reclaims %v, want 0 1 1", lc, free, rec)
	}
	if c := e.metric(e.m.Allocations.WithLabelValues(testNet, StateCommitted)); c != 2 {
		t.Fatalf("allocations committed = %v, want 2", c)
	}

	// Sweep results: a store that cannot be decoded is a store error.
	bad := store.FilePath(e.dir, "other")
	st, err := store.Open(bad, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := bolt.Open(bad, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("allocs")).Put([]byte{4, 10, 2, 0, 1}, []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	rep := e.sweepAt(t0.Add(8 * time.Minute))
	// A record that does not decode is quarantined, not a store error: the
	// network is swept and the damage exported.
	if rep.Result != SweepOK {
		t.Fatalf("sweep with an undecodable record: result %s, want ok", rep.Result)
	}
	if got := e.metric(e.m.DamagedRecords.WithLabelValues("other")); got != 1 {
		t.Fatalf("damaged_records{other} = %v, want 1", got)
	}
	os.Remove(bad)
	// An environment error (a symlink in place of a store: ELOOP) is a store
	// error, counted with its errno; the store is neither set aside nor
	// rebuilt, and nothing is created at the link's target.
	link := store.FilePath(e.dir, "envfail")
	target := filepath.Join(t.TempDir(), "target.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	rep = e.sweepAt(t0.Add(8*time.Minute + time.Second))
	if rep.Result != SweepStoreError {
		t.Fatalf("sweep with a symlinked store: result %s, want store_error", rep.Result)
	}
	if got := e.metric(e.m.StoreErrors.WithLabelValues("envfail", ClassEnvironment, "ELOOP")); got != 1 {
		t.Fatalf("store_errors_total{envfail,environment,ELOOP} = %v, want 1\n%s", got, e.logs.String())
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a store was created at the symlink's target: %v", err)
	}
	if m, _ := filepath.Glob(link + ".corrupt-*"); len(m) != 0 {
		t.Fatalf("an environment error set the store aside: %v", m)
	}
	if got := e.metric(e.m.Sweeps.WithLabelValues(SweepStoreError)); got != 1 {
		t.Fatalf("sweeps{store_error} = %v, want 1", got)
	}
	os.Remove(link)
	// The healthy network was still swept and exported.
	if got := e.metric(e.m.PoolFree.WithLabelValues(testNet, "0")); got != 1 {
		t.Fatalf("healthy network's pool free = %v during another store's error", got)
	}
	os.Remove(bad)

	e.cri.setListErr(errors.New("down"))
	e.sweepAt(t0.Add(9 * time.Minute))
	if ok, cri, up := e.metric(e.m.Sweeps.WithLabelValues(SweepOK)), e.metric(e.m.Sweeps.WithLabelValues(SweepCRIError)), e.metric(e.m.CRIUp); ok != 9 || cri != 1 || up != 0 {
		t.Fatalf("sweeps ok=%v cri_error=%v cri_up=%v, want 9 1 0", ok, cri, up)
	}
	if n := testutil.CollectAndCount(e.m.SweepDuration); n != 1 {
		t.Fatalf("sweep duration series %d", n)
	}
	if err := testutil.CollectAndCompare(e.m.Sweeps, strings.NewReader(`
# HELP hostlease_sweeps_total Sweeps run, by result (ok, cri_error, store_error).
# TYPE hostlease_sweeps_total counter
hostlease_sweeps_total{result="cri_error"} 1
hostlease_sweeps_total{result="ok"} 9
hostlease_sweeps_total{result="store_error"} 1
`)); err != nil {
		t.Fatal(err)
	}

	// A restarted daemon exports the store's cumulative count once.
	e2 := &Sweeper{Opts: e.s.Opts, CRI: newFakeCRI(), Metrics: NewMetrics(prometheus.NewRegistry()), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: e.s.Now}
	e2.Sweep(context.Background())
	e2.Sweep(context.Background())
	if got := testutil.ToFloat64(e2.Metrics.AllocationFailures.WithLabelValues(testNet, "0", FailureExhausted)); got != 3 {
		t.Fatalf("restarted daemon: failures = %v, want 3", got)
	}
}

// The mass-reclaim guard refuses the whole sweep, alerts, and waits.
func TestSweepMassReclaimGuard(t *testing.T) {
	// 6 live records and 4 leaks: 10 records, a limit of 3 (then 3 of 9).
	e := newSweepEnv(t, func(o *Options) { o.MaxReclaimFraction = 0.35 })
	for i := range 6 {
		id := fmt.Sprintf("live-%d", i)
		e.cri.set(id, SandboxReady, e.alloc(id, t0.Add(-time.Hour)).IP)
	}
	var leaks []*allocator.Record
	for i := range 4 {
		leaks = append(leaks, e.alloc(fmt.Sprintf("job-%d", i), t0.Add(-time.Hour)))
	}
	for i := range 3 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
		if len(e.net(rep).Reclaimed) != 0 {
			t.Fatalf("sweep %d reclaimed past the guard", i)
		}
	}
	nr := e.net(e.sweepAt(t0.Add(3 * time.Minute)))
	if !nr.Verdict.Guarded || nr.Verdict.WouldReclaim != 4 || nr.Verdict.GuardLimit != 3 || len(e.records()) != 10 {
		t.Fatalf("guard: %+v, %d records left", nr.Verdict, len(e.records()))
	}
	if got := e.metric(e.m.ReclaimGuardTripped.WithLabelValues(testNet)); got != 2 {
		t.Errorf("guard tripped %v times, want 2 (sweeps 3 and 4)", got)
	}
	if got := e.metric(e.m.Vetoes.WithLabelValues(testNet, VetoMassReclaimGuard)); got != 8 {
		t.Errorf("vetoes{mass_reclaim_guard} = %v, want 8", got)
	}
	var warned int
	for _, ev := range e.events() {
		if ev.Reason == "MassReclaimRefused" && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Node" {
			warned++
		}
	}
	if warned != 2 {
		t.Errorf("%d MassReclaimRefused events, want 2: %+v", warned, e.events())
	}
	if r := e.records()[leaks[0].IP]; r.Obs.Verdict != "guarded" {
		t.Errorf("guarded record verdict %q", r.Obs.Verdict)
	}
	// One leak is released by hand; three are within the limit.
	e.release("job-0", t0.Add(4*time.Minute))
	if nr := e.net(e.sweepAt(t0.Add(5 * time.Minute))); nr.Verdict.Guarded || len(nr.Reclaimed) != 3 {
		t.Fatalf("at the limit: guarded %v reclaimed %d, want 3", nr.Verdict.Guarded, len(nr.Reclaimed))
	}
}

// A StatefulSet pod recreated under the same name (new UID, new address)
// does not protect its predecessor's leaked address, and the Event about the
// reclaim is not pinned on the new pod, which never had that address.
func TestSweepStatefulSetNameReuse(t *testing.T) {
	e := newSweepEnv(t)
	old := e.alloc("web-0", t0.Add(-time.Hour)) // pod default/web-0, uid-web-0
	replacement := e.alloc("web-0-new", t0.Add(-10*time.Minute))
	e.cri.set("web-0-new", SandboxReady, replacement.IP)
	e.addPod("web-0", "uid-web-0-replacement", corev1.PodRunning, replacement.IP)
	for i := range 3 {
		e.sweepAt(t0.Add(time.Duration(i) * time.Minute))
	}
	recs := e.records()
	if recs[old.IP] != nil || recs[replacement.IP] == nil {
		t.Fatalf("after name reuse: store %v, want the old address reclaimed and the new one kept", keys(recs))
	}
	evs := e.events()
	if len(evs) != 1 {
		t.Fatalf("events %+v, want 1", evs)
	}
	if o := evs[0].InvolvedObject; o.Kind != "Node" || o.Name != "node1" {
		t.Fatalf("reclaim Event on %+v, want the node (the pod named web-0 now is another pod)", o)
	}
}

// A network removed from the node (its store deleted) stops being exported:
// its last pool gauges would otherwise keep the exhaustion alerts firing.
func TestSweepForgetsRemovedNetwork(t *testing.T) {
	e := newSweepEnv(t)
	r := e.alloc("sb-a", t0.Add(-time.Hour))
	e.cri.set("sb-a", SandboxReady, r.IP)
	other := store.FilePath(e.dir, "gone")
	st, err := store.Open(other, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(func(tx *store.Tx) error {
		if err := tx.SetRangeSets(testRanges); err != nil {
			return err
		}
		return tx.RecordExhaustion(0, "10.1.0.10-10.1.0.200", t0)
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	e.sweepAt(t0)
	if got := testutil.ToFloat64(e.m.PoolSize.WithLabelValues("gone", "0")); got != 191 {
		t.Fatalf("pool size of network gone = %v before removal", got)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	e.sweepAt(t0.Add(time.Minute))
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var stale, kept []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "network" && l.GetValue() == "gone" {
					stale = append(stale, mf.GetName())
				}
				if l.GetName() == "network" && l.GetValue() == testNet && mf.GetName() == "hostlease_pool_size_addresses" {
					kept = append(kept, mf.GetName())
				}
			}
		}
	}
	if len(stale) > 0 {
		t.Fatalf("series of the removed network remain: %v", stale)
	}
	if len(kept) != 1 {
		t.Fatalf("the remaining network's pool size series is gone too")
	}
}

// Once nothing changes, a sweep writes nothing: no write transaction, so no
// exclusive lock and no fdatasyncs for plugin calls to wait behind.
func TestSweepThatChangesNothingWritesNothing(t *testing.T) {
	e := newSweepEnv(t)
	created := t0.Add(-time.Minute)
	live := e.alloc("sb-live", created)
	e.alloc("sb-otherip", created)
	e.alloc("sb-notready", created)
	e.alloc("sb-absent", created) // too young to reclaim for the whole test
	e.cri.set("sb-live", SandboxReady, live.IP)
	e.cri.set("sb-otherip", SandboxReady, addr("10.9.9.9"))
	e.cri.set("sb-notready", SandboxNotReady)
	// --misses sweeps: the absent record's miss count grows to its cap.
	for i := range e.s.Opts.Misses {
		e.sweepAt(t0.Add(time.Duration(i) * time.Second))
	}
	before := fileBytes(t, e.path)
	for i := range 3 {
		rep := e.sweepAt(t0.Add(time.Duration(10+i) * time.Second))
		if rep.Result != SweepOK || len(e.net(rep).Verdict.Decisions) != 4 {
			t.Fatalf("sweep: %s, %d decisions", rep.Result, len(e.net(rep).Verdict.Decisions))
		}
		if !bytes.Equal(fileBytes(t, e.path), before) {
			t.Fatalf("steady sweep %d changed the store", i+1)
		}
	}
	// A new daemon (nothing cached) writes nothing either.
	e.s = &Sweeper{Opts: e.s.Opts, CRI: e.cri, Metrics: e.s.Metrics, Log: e.s.Log, Now: e.s.Now}
	e.sweepAt(t0.Add(20 * time.Second))
	if !bytes.Equal(fileBytes(t, e.path), before) {
		t.Fatal("a new daemon's first sweep over an up-to-date store changed it")
	}
	// A plugin's change is picked up by the next sweep.
	e.release("sb-live", t0.Add(21*time.Second))
	e.cri.remove("sb-live")
	e.sweepAt(t0.Add(22 * time.Second))
	if recs := e.records(); len(recs) != 3 {
		t.Fatalf("after a DEL: %d records, want 3", len(recs))
	}
}

// A sweep writes every change the policy reads at once, but rewrites at most
// MaxInfoWrites records only for what a person reads (verdict, sandbox
// state); the rest follow on the next sweeps. `hostlease-gc leaks` (the
// decisions) shows every verdict at once, `list` (the store) within a few
// sweeps.
func TestSweepBoundsInformationalWrites(t *testing.T) {
	e := newSweepEnv(t)
	e.s.infoWrites = 2
	created := t0.Add(-time.Minute)
	var listed []*allocator.Record
	for i := range 5 {
		id := fmt.Sprintf("sb-%d", i)
		listed = append(listed, e.alloc(id, created))
		e.cri.set(id, SandboxReady, addr("10.9.9.9")) // READY with another address: stays pending
	}
	absent := e.alloc("sb-absent", created)
	countReady := func() int {
		n := 0
		for _, r := range e.records() {
			if r.Obs.SandboxState == SandboxReady && r.Obs.Verdict == "live" {
				n++
			}
		}
		return n
	}
	for i, want := range []int{2, 4, 5, 5} {
		rep := e.sweepAt(t0.Add(time.Duration(i) * time.Second))
		for _, d := range e.net(rep).Verdict.Decisions {
			if d.Record.IP != absent.IP && (d.Reason != "live" || d.Obs.SandboxState != SandboxReady) {
				t.Fatalf("sweep %d decided %s: %q %+v, want live and READY", i+1, d.Record.IP, d.Reason, d.Obs)
			}
		}
		if got := countReady(); got != want {
			t.Fatalf("after sweep %d, %d records store READY/live, want %d", i+1, got, want)
		}
		if r := e.records()[absent.IP]; r.Obs.Misses != min(i+1, e.s.Opts.Misses) || r.Obs.SandboxState != SandboxAbsent {
			t.Fatalf("sweep %d: absent record stored %+v, want miss %d (the policy's fields are never held back)", i+1, r.Obs, min(i+1, e.s.Opts.Misses))
		}
	}
	if snap, err := ReadSnapshot(e.path); err != nil || len(snap.Records) != 6 {
		t.Fatalf("ReadSnapshot: %v", err)
	} else if r := snap.Records[0]; r.IP != listed[0].IP || r.Obs.SandboxState != SandboxReady {
		t.Fatalf("ReadSnapshot (hostlease-gc list) shows %+v", r)
	}
}

// The daemon's decode cache holds what it wrote without decoding it again:
// a long-running daemon decides exactly as a new one reading the same store.
func TestSweepCacheDecidesAsANewDaemon(t *testing.T) {
	e := newSweepEnv(t)
	created := t0.Add(-time.Hour)
	live := e.alloc("sb-live", created)
	pend := e.alloc("sb-pending", created)
	e.alloc("sb-notready", created)
	e.alloc("sb-gone", created)
	young := e.alloc("sb-young", t0)
	e.cri.set("sb-live", SandboxReady, live.IP)
	e.cri.set("sb-pending", SandboxReady, pend.IP)
	e.cri.set("sb-notready", SandboxNotReady)
	e.cri.set("sb-young", SandboxReady, young.IP)
	for i := range 8 {
		at := t0.Add(time.Duration(i) * time.Minute)
		switch i {
		case 2:
			e.cri.remove("sb-young") // goes absent
		case 4:
			e.cri.set("sb-young", SandboxReady, young.IP) // back again
			// and a plugin touches a record
			e.update(func(tx *store.Tx) error {
				r, _ := tx.Get(live.IP)
				r.Netns = "/var/run/netns/moved"
				return tx.Put(r)
			})
		}
		o := *e.s.Opts
		o.DryRun = true
		fresh := &Sweeper{Opts: &o, CRI: e.cri, Kube: e.s.Kube, Log: e.s.Log, Now: e.s.Now}
		e.now = at
		want := e.net(fresh.Sweep(context.Background())).Verdict.Decisions
		got := e.net(e.sweepAt(at)).Verdict.Decisions
		if len(got) != len(want) {
			t.Fatalf("sweep %d: %d decisions, a new daemon %d", i+1, len(got), len(want))
		}
		for j := range got {
			g, w := got[j], want[j]
			if g.Action != w.Action || g.Reason != w.Reason || g.Detail != w.Detail || g.Obs != w.Obs || !reflect.DeepEqual(*g.Record, *w.Record) {
				t.Fatalf("sweep %d, %s: the running daemon decided %v %q %+v on %+v\na new daemon %v %q %+v on %+v",
					i+1, g.Record.IP, g.Action, g.Reason, g.Obs, *g.Record, w.Action, w.Reason, w.Obs, *w.Record)
			}
		}
	}
	if n := e.reclaims(ReclaimSandboxAbsent); n != 1 {
		t.Fatalf("reclaims %v, want the gone sandbox's", n)
	}
}

// A sweep whose every write finds its record changed since the snapshot (here
// released while CRI was being listed) commits nothing: the store is left
// byte for byte as the plugin left it (Store.Update rolls back a transaction
// that wrote nothing: no empty commit, no fdatasyncs).
func TestSweepCommitsNothingWhenAllChangedSince(t *testing.T) {
	e := newSweepEnv(t)
	e.alloc("sb-gone", t0.Add(-time.Hour)) // absent: its first miss is due
	var after []byte
	e.cri.setOnList(func() {
		e.release("sb-gone", t0)
		after = fileBytes(t, e.path)
	})
	rep := e.sweepAt(t0)
	e.cri.setOnList(nil)
	if d := e.net(rep).Verdict.Decisions; len(d) != 1 || d[0].Obs.Misses != 1 {
		t.Fatalf("precondition: the snapshot's record should get its first miss: %+v", d)
	}
	if rep.Result != SweepOK || e.net(rep).Err != nil {
		t.Fatalf("sweep: %s %v", rep.Result, e.net(rep).Err)
	}
	if !bytes.Equal(fileBytes(t, e.path), after) {
		t.Fatal("the sweep committed a transaction that wrote nothing")
	}
	if len(e.records()) != 0 {
		t.Fatalf("records %v, want none", e.records())
	}
}
