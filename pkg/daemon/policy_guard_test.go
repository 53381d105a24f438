package daemon

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// The policy's safeguards against a bad view of the node: an incomplete CRI
// answer, a mass reclaim; and which decisions a sweep writes.

// fakeListCRI is a CRI whose ListSandboxes answer is scripted.
type fakeListCRI struct {
	list []reclaim.PodSandbox
	err  error
}

func (f *fakeListCRI) ListSandboxes(context.Context) ([]reclaim.PodSandbox, error) {
	return f.list, f.err
}
func (f *fakeListCRI) SandboxIPs(context.Context, string) ([]netip.Addr, error) {
	return nil, errors.New("not scripted")
}
func (f *fakeListCRI) Close() error { return nil }

// ListView judges the CRI answer; an answer it distrusts reclaims nothing
// through Decide and leaves observations as they were.
func TestListViewIncompleteReclaimsNothing(t *testing.T) {
	cases := []struct {
		name      string
		cri       *fakeListCRI
		committed int
		complete  bool
		why       string
	}{
		{"list error", &fakeListCRI{err: errors.New("connection refused")}, 1, false, "connection refused"},
		{"empty list while committed records exist", &fakeListCRI{list: []reclaim.PodSandbox{}}, 3, false, "3 committed"},
		{"nil list while committed records exist", &fakeListCRI{}, 1, false, "no sandboxes"},
		{"sandbox without an ID", &fakeListCRI{list: []reclaim.PodSandbox{{ID: "sb-z", State: reclaim.SandboxReady}, {State: reclaim.SandboxReady}}}, 0, false, "without an ID"},
		{"empty list on an empty node", &fakeListCRI{list: []reclaim.PodSandbox{}}, 0, true, ""},
		{"other sandboxes listed", &fakeListCRI{list: []reclaim.PodSandbox{{ID: "sb-z", State: reclaim.SandboxReady}}}, 5, true, ""},
	}
	now := t0.Add(time.Hour)
	rec := func(ip, id string, o allocator.Observation) *allocator.Record {
		return &allocator.Record{IP: addr(ip), PrefixLen: 24, ContainerID: id, IfName: "eth0", Network: "podnet",
			State: allocator.StateCommitted, Created: t0, Committed: t0, Obs: o}
	}
	p := reclaim.Policy{Misses: 3, Grace: 2 * time.Minute, MinAge: 5 * time.Minute, MaxReclaimFraction: reclaim.DefaultMaxFraction}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			view, _ := ListView(context.Background(), tc.cri, tc.committed, now)
			if view.Complete != tc.complete {
				t.Fatalf("Complete=%v (why %q), want %v", view.Complete, view.Why, tc.complete)
			}
			if !view.ListedAt.Equal(now) {
				t.Errorf("ListedAt=%v, want the time the list was asked for", view.ListedAt)
			}
			if !strings.Contains(view.Why, tc.why) {
				t.Errorf("Why=%q, want it to mention %q", view.Why, tc.why)
			}
			recs := []*allocator.Record{
				rec("10.0.0.10", "sb-a", allocator.Observation{Misses: 2, FirstMissed: now.Add(-5 * time.Minute), SandboxState: reclaim.SandboxAbsent, Verdict: "absent"}),
				rec("10.0.0.99", "sb-b", allocator.Observation{SandboxState: reclaim.SandboxAbsent, Verdict: "absent"}),
			}
			api := reclaim.APIView{Enabled: true, Available: true}
			v := reclaim.Decide(p, []reclaim.Candidate{{Record: recs[0], NetnsGone: true}, {Record: recs[1]}}, len(recs), view, api, now)
			for i, d := range v.Decisions {
				if tc.complete {
					if i == 0 && d.Action != reclaim.Release {
						t.Errorf("complete answer without the sandbox: %v %q, want reclaim", d.Action, d.Reason)
					}
					continue
				}
				if d.Action != reclaim.Keep || d.Reason != "cri_unavailable" {
					t.Errorf("record %s: %v %q, want keep cri_unavailable", d.Record.IP, d.Action, d.Reason)
				}
				o, want := d.Obs, recs[i].Obs
				if o.Misses != want.Misses || !o.FirstMissed.Equal(want.FirstMissed) || o.SandboxState != want.SandboxState {
					t.Errorf("record %s: observation changed %+v -> %+v", d.Record.IP, want, o)
				}
			}
		})
	}
}

func TestPolicyFromOptions(t *testing.T) {
	o := &Options{Misses: 4, Grace: time.Minute, MinAge: 7 * time.Minute, NetnsGrace: 5 * time.Second, MaxReclaimFraction: 0.25}
	want := reclaim.Policy{Misses: 4, Grace: time.Minute, MinAge: 7 * time.Minute, NetnsGrace: 5 * time.Second, MaxReclaimFraction: 0.25}
	if got := PolicyFromOptions(o); got != want {
		t.Fatalf("PolicyFromOptions = %+v, want %+v", got, want)
	}
}
