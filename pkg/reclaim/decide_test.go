package reclaim

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// A sweep's decisions on one network as pure functions of plain values, in
// the sweep's order (Reconcile, Judge, NeedsAPI, Settle, PlanStore; and
// ShouldRebuild for an unreadable store): the records with their proofs,
// the CRI view, the addresses READY sandboxes use, the API view and
// --dry-run in; verdicts, re-reservations, conflicts, store plans and
// rebuilds out.

// planRec is a committed record of sandbox id at 10.1.0.<100+i>, created an
// hour before late; opts may mark it absent for two sweeps (due at late).
func planRec(i int, id string, mods ...func(*allocator.Record)) *allocator.Record {
	return prec(append([]func(*allocator.Record){func(r *allocator.Record) {
		r.IP, r.ContainerID, r.PodUID, r.Created = netip.AddrFrom4([4]byte{10, 1, 0, byte(100 + i)}), id, "uid-"+id, late.Add(-time.Hour)
	}}, mods...)...)
}

var absentTwice = missed(2, late.Add(-5*time.Minute))

type planCase struct {
	name       string
	recs       []*allocator.Record
	proven     map[string]bool // sandbox IDs whose netns is gone
	cri        CRIView
	uses       []Use
	api        APIView
	dryRun     bool
	unreadable bool // the store could not be read: only a rebuild is decided
	// observed facts that lead to writes
	hostLocalGone, indexesChanged bool

	wantActions                                         map[string]string // sandbox ID -> "reason" or "reclaim:reason" or "commit"
	wantNeedsAPI                                        bool
	wantReReserve, wantConflicts                        []string // addresses
	wantWrites                                          []string // sandbox IDs whose record is written
	wantPlanned                                         int      // re-reservations planned
	wantHostLocal, wantRepair, wantRebuild, wantGuarded bool
}

func TestDecidePlanTable(t *testing.T) {
	ready := func(id string, ips ...netip.Addr) PodSandbox {
		return PodSandbox{ID: id, State: SandboxReady, IPs: ips}
	}
	cri := criAt(late, ready("sb-live"), ready("sb-new", addr("10.1.0.103")), PodSandbox{ID: "sb-stopped", State: SandboxNotReady})
	live := planRec(1, "sb-live")
	newRec := planRec(3, "sb-new", pending)
	stopped := planRec(4, "sb-stopped")
	leak := planRec(5, "sb-leak", absentTwice)
	young := planRec(6, "sb-young", func(r *allocator.Record) { r.Created = late.Add(-time.Minute) })
	gone := planRec(7, "sb-gone")
	base := []*allocator.Record{live, newRec, stopped, leak, young, gone}
	baseActions := map[string]string{"sb-live": "live", "sb-new": "commit", "sb-stopped": "stale",
		"sb-leak": "reclaim:sandbox_absent", "sb-young": "absent", "sb-gone": "reclaim:netns_gone"}
	// Every record's observation changes on this first look but the
	// reclaims': all written.
	baseWrites := []string{"sb-live", "sb-new", "sb-stopped", "sb-leak", "sb-young", "sb-gone"}
	uses := []Use{
		{Sandbox: PodSandbox{ID: "sb-ghost", State: SandboxReady}, IP: addr("10.1.0.20")}, // unrecorded
		{Sandbox: PodSandbox{ID: "sb-twin", State: SandboxReady}, IP: live.IP},            // held by READY sb-live
		{Sandbox: PodSandbox{ID: "sb-thief", State: SandboxReady}, IP: leak.IP},           // held by absent sb-leak
	}
	cases := []planCase{
		{name: "reclaims, keeps, commits; re-reserves and reports a conflict",
			recs: base, proven: map[string]bool{"sb-gone": true}, cri: cri, uses: uses,
			wantActions: baseActions, wantNeedsAPI: true, wantWrites: baseWrites,
			wantReReserve: []string{"10.1.0.20", "10.1.0.105"}, wantConflicts: []string{"10.1.0.101"}, wantPlanned: 2},
		{name: "dry run: the same verdicts, nothing to write",
			recs: base, proven: map[string]bool{"sb-gone": true}, cri: cri, uses: uses, dryRun: true,
			hostLocalGone: true, indexesChanged: true,
			wantActions: baseActions, wantNeedsAPI: true,
			wantReReserve: []string{"10.1.0.20", "10.1.0.105"}, wantConflicts: []string{"10.1.0.101"}},
		{name: "the API server vetoes what a live pod lists, never a proven reclaim",
			recs: base, proven: map[string]bool{"sb-gone": true}, cri: cri,
			api:         apiWith(Pod{UID: "uid-sb-leak", Namespace: "default", Name: "web-0", IPs: []netip.Addr{leak.IP}}),
			wantActions: map[string]string{"sb-leak": "vetoed", "sb-gone": "reclaim:netns_gone"}, wantNeedsAPI: true, wantWrites: baseWrites},
		{name: "an unreadable API server keeps the reclaims without proof",
			recs: base, cri: cri, api: APIView{Enabled: true},
			wantActions: map[string]string{"sb-leak": "api_unavailable", "sb-gone": "absent"}, wantNeedsAPI: true, wantWrites: baseWrites},
		{name: "proof of death needs no API server",
			recs: []*allocator.Record{live, gone}, proven: map[string]bool{"sb-gone": true}, cri: cri,
			wantActions: map[string]string{"sb-gone": "reclaim:netns_gone"}, wantWrites: []string{"sb-live", "sb-gone"}},
		{name: "the guard refuses reclaims without proof beyond the limit, not proven ones",
			recs:   []*allocator.Record{planRec(10, "a", absentTwice), planRec(11, "b", absentTwice), planRec(12, "c", absentTwice), gone},
			proven: map[string]bool{"sb-gone": true}, cri: criAt(late),
			wantActions:  map[string]string{"a": "guarded", "b": "guarded", "c": "guarded", "sb-gone": "reclaim:netns_gone"},
			wantNeedsAPI: true, wantGuarded: true, wantWrites: []string{"a", "b", "c", "sb-gone"}},
		{name: "an incomplete CRI answer decides nothing and re-reserves nothing",
			recs: base, cri: CRIView{Why: "deadline exceeded", ListedAt: late}, uses: uses,
			wantActions: map[string]string{"sb-live": "cri_unavailable", "sb-leak": "cri_unavailable"},
			wantWrites:  baseWrites},
		{name: "host-local files gone and disagreeing indexes are written",
			recs: []*allocator.Record{live}, cri: cri, hostLocalGone: true, indexesChanged: true,
			wantActions: map[string]string{"sb-live": "live"}, wantWrites: []string{"sb-live"}, wantHostLocal: true, wantRepair: true},
		{name: "an unreadable store is rebuilt with a complete CRI answer",
			unreadable: true, cri: cri, wantRebuild: true},
		{name: "an unreadable store is not rebuilt without a complete CRI answer",
			unreadable: true, cri: CRIView{Why: "x"}},
		{name: "an unreadable store is not rebuilt in a dry run",
			unreadable: true, cri: cri, dryRun: true},
		{name: "a readable store is not rebuilt", cri: cri},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkPlan(t, tc) })
	}
}

func checkPlan(t *testing.T, tc planCase) {
	t.Helper()
	if got := ShouldRebuild(tc.unreadable, tc.cri, tc.dryRun); got != tc.wantRebuild {
		t.Errorf("ShouldRebuild = %v, want %v", got, tc.wantRebuild)
	}
	if tc.unreadable {
		return
	}
	var cands []Candidate
	for _, r := range tc.recs {
		cands = append(cands, Candidate{Record: r, NetnsGone: tc.proven[r.ContainerID]})
	}
	rereserve := Reconcile(tc.uses, tc.recs, nil, testRanges, tc.cri)
	v := Judge(testPolicy, cands, tc.cri, late)
	if got := v.NeedsAPI(); got != tc.wantNeedsAPI {
		t.Errorf("NeedsAPI = %v, want %v", got, tc.wantNeedsAPI)
	}
	Settle(&v, testPolicy, len(tc.recs), tc.api)
	p := PlanStore(&v, rereserve, StoreFacts{IndexesChanged: tc.indexesChanged, HostLocalGone: tc.hostLocalGone}, MaxInfoWrites, tc.dryRun)

	got := map[string]string{}
	for _, d := range v.Decisions {
		switch d.Action {
		case Release:
			got[d.Record.ContainerID] = "reclaim:" + string(d.Reason)
		case MarkCommitted:
			got[d.Record.ContainerID] = "commit"
		default:
			got[d.Record.ContainerID] = string(d.Reason)
		}
	}
	for id, want := range tc.wantActions {
		if got[id] != want {
			t.Errorf("%s: %q, want %q", id, got[id], want)
		}
	}
	if v.Guarded != tc.wantGuarded {
		t.Errorf("guarded %v, want %v", v.Guarded, tc.wantGuarded)
	}
	var rr, conflicts []string
	for _, r := range rereserve {
		if r.Conflict {
			conflicts = append(conflicts, r.IP.String())
		} else {
			rr = append(rr, r.IP.String())
		}
	}
	if !slices.Equal(rr, tc.wantReReserve) || !slices.Equal(conflicts, tc.wantConflicts) {
		t.Errorf("re-reserve %v conflicts %v, want %v %v", rr, conflicts, tc.wantReReserve, tc.wantConflicts)
	}
	var writes []string
	for _, i := range p.Writes {
		writes = append(writes, v.Decisions[i].Record.ContainerID)
	}
	if !slices.Equal(writes, tc.wantWrites) {
		t.Errorf("writes %v, want %v", writes, tc.wantWrites)
	}
	if len(p.ReReserve) != tc.wantPlanned || p.ReleaseHostLocal != tc.wantHostLocal || p.RepairIndexes != tc.wantRepair {
		t.Errorf("plan: %d re-reservations, host-local %v, repair %v; want %d %v %v",
			len(p.ReReserve), p.ReleaseHostLocal, p.RepairIndexes, tc.wantPlanned, tc.wantHostLocal, tc.wantRepair)
	}
	if tc.dryRun && !p.Empty() {
		t.Errorf("a dry run planned writes: %+v", p)
	}
}
