package daemon

import (
	"context"
	"fmt"
	"github.com/hostlease/hostlease/pkg/reclaim"
	"net/netip"
	"sync"
	"sync/atomic"
)

// fakeCRI is an in-process runtime: a sandbox list the test edits, and a hook
// that runs inside ListSandboxes (to model what happens while the daemon waits
// for the runtime's answer).
type fakeCRI struct {
	mu        sync.Mutex
	order     []string
	sandboxes map[string]reclaim.PodSandbox
	ips       map[string][]netip.Addr
	listErr   error
	onList    func()
	lists     atomic.Int64
	statuses  atomic.Int64
}

func newFakeCRI() *fakeCRI {
	return &fakeCRI{sandboxes: map[string]reclaim.PodSandbox{}, ips: map[string][]netip.Addr{}}
}

// set adds or replaces a sandbox; its pod metadata is derived from the ID the
// same way the sweepEnv's allocations derive it.
func (f *fakeCRI) set(id, state string, ips ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok {
		f.order = append(f.order, id)
	}
	f.sandboxes[id] = reclaim.PodSandbox{ID: id, State: state, PodNamespace: "default", PodName: id, PodUID: "uid-" + id}
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

func (f *fakeCRI) ListSandboxes(ctx context.Context) ([]reclaim.PodSandbox, error) {
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
	out := []reclaim.PodSandbox{}
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
