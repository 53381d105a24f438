package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// The decide stage as a pure function of plain values: a report as observe
// leaves it (snapshots, candidates, CRI view), the addresses READY sandboxes
// use, the API view and --dry-run in; verdicts, re-reservations, conflicts,
// store plans and rebuilds out.

// planRec is a committed record of sandbox id at 10.1.0.<100+i>, created an
// hour before late; opts may mark it absent for two sweeps (due at late).
func planRec(i int, id string, mods ...func(*allocator.Record)) *allocator.Record {
	return prec(append([]func(*allocator.Record){func(r *allocator.Record) {
		r.IP, r.ContainerID, r.PodUID, r.Created = netip.AddrFrom4([4]byte{10, 1, 0, byte(100 + i)}), id, "uid-"+id, late.Add(-time.Hour)
	}}, mods...)...)
}

var absentTwice = missed(2, late.Add(-5*time.Minute))

type planCase struct {
	name    string
	recs    []*allocator.Record
	proven  map[string]bool // sandbox IDs whose netns is gone
	cri     reclaim.CRIView
	uses    []reclaim.Use
	api     reclaim.APIView
	dryRun  bool
	readErr error // the store's read error
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
	ready := func(id string, ips ...netip.Addr) reclaim.Sandbox {
		return reclaim.Sandbox{ID: id, State: reclaim.SandboxReady, IPs: ips}
	}
	cri := criAt(late, ready("sb-live"), ready("sb-new", addr("10.1.0.103")), reclaim.Sandbox{ID: "sb-stopped", State: reclaim.SandboxNotReady})
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
	uses := []reclaim.Use{
		{Sandbox: reclaim.CRISandbox{ID: "sb-ghost", State: reclaim.SandboxReady}, IP: addr("10.1.0.20")}, // unrecorded
		{Sandbox: reclaim.CRISandbox{ID: "sb-twin", State: reclaim.SandboxReady}, IP: live.IP},            // held by READY sb-live
		{Sandbox: reclaim.CRISandbox{ID: "sb-thief", State: reclaim.SandboxReady}, IP: leak.IP},           // held by absent sb-leak
	}
	unreadable := fmt.Errorf("open store: %w", store.ErrUnreadable)
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
			api:         apiWith(reclaim.Pod{UID: "uid-sb-leak", Namespace: "default", Name: "web-0", IPs: []netip.Addr{leak.IP}}),
			wantActions: map[string]string{"sb-leak": "vetoed", "sb-gone": "reclaim:netns_gone"}, wantNeedsAPI: true, wantWrites: baseWrites},
		{name: "an unreadable API server keeps the reclaims without proof",
			recs: base, cri: cri, api: reclaim.APIView{Enabled: true},
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
			recs: base, cri: reclaim.CRIView{Why: "deadline exceeded", ListedAt: late}, uses: uses,
			wantActions: map[string]string{"sb-live": "cri_unavailable", "sb-leak": "cri_unavailable"},
			wantWrites:  baseWrites},
		{name: "host-local files gone and disagreeing indexes are written",
			recs: []*allocator.Record{live}, cri: cri, hostLocalGone: true, indexesChanged: true,
			wantActions: map[string]string{"sb-live": "live"}, wantWrites: []string{"sb-live"}, wantHostLocal: true, wantRepair: true},
		{name: "an unreadable store is rebuilt with a complete CRI answer",
			readErr: unreadable, cri: cri, wantRebuild: true},
		{name: "an unreadable store is not rebuilt without a complete CRI answer",
			readErr: unreadable, cri: reclaim.CRIView{Why: "x"}},
		{name: "an unreadable store is not rebuilt in a dry run",
			readErr: unreadable, cri: cri, dryRun: true},
		{name: "a store with an environment error is never rebuilt",
			readErr: &store.IOError{Op: "open", Path: "x.db", Err: syscall.EROFS}, cri: cri},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkPlan(t, tc) })
	}
}

func checkPlan(t *testing.T, tc planCase) {
	t.Helper()
	nr := &NetworkReport{Network: testNet, Err: tc.readErr, hostLocalGone: tc.hostLocalGone}
	if tc.readErr == nil {
		snap := &Snapshot{Records: tc.recs, RangeSets: testRanges}
		snap.Indexes.OwnerAdded = map[bool]int{true: 1}[tc.indexesChanged]
		nr.Snapshot = snap
		for _, r := range tc.recs {
			nr.cands = append(nr.cands, reclaim.Candidate{Record: r, NetnsGone: tc.proven[r.ContainerID]})
		}
	}
	rep := &SweepReport{DryRun: tc.dryRun, CRI: tc.cri, Networks: []*NetworkReport{nr}}
	planStores(rep)
	judgeNetworks(rep, tc.uses, testPolicy, late)
	if got := needsAPI(rep); got != tc.wantNeedsAPI {
		t.Errorf("needsAPI = %v, want %v", got, tc.wantNeedsAPI)
	}
	rep.API = tc.api
	settleNetworks(rep, testPolicy, reclaim.MaxInfoWrites, late)

	if nr.rebuild != tc.wantRebuild || rep.cleanTemp == tc.dryRun {
		t.Errorf("rebuild %v cleanTemp %v, want %v %v", nr.rebuild, rep.cleanTemp, tc.wantRebuild, !tc.dryRun)
	}
	got := map[string]string{}
	for _, d := range nr.Verdict.Decisions {
		switch d.Action {
		case reclaim.Reclaim:
			got[d.Record.ContainerID] = "reclaim:" + string(d.Reason)
		case reclaim.MarkCommitted:
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
	if nr.Verdict.Guarded != tc.wantGuarded {
		t.Errorf("guarded %v, want %v", nr.Verdict.Guarded, tc.wantGuarded)
	}
	var rereserve, conflicts []string
	for _, rr := range nr.ReReserve {
		if rr.Conflict {
			conflicts = append(conflicts, rr.IP.String())
		} else {
			rereserve = append(rereserve, rr.IP.String())
		}
	}
	if !slices.Equal(rereserve, tc.wantReReserve) || !slices.Equal(conflicts, tc.wantConflicts) {
		t.Errorf("re-reserve %v conflicts %v, want %v %v", rereserve, conflicts, tc.wantReReserve, tc.wantConflicts)
	}
	var writes []string
	for _, w := range nr.plan.writes {
		writes = append(writes, w.d.Record.ContainerID)
	}
	if !slices.Equal(writes, tc.wantWrites) {
		t.Errorf("writes %v, want %v", writes, tc.wantWrites)
	}
	p := nr.plan
	if len(p.reReserve) != tc.wantPlanned || p.releaseHostLocal != tc.wantHostLocal || p.repairIndexes != tc.wantRepair {
		t.Errorf("plan: %d re-reservations, host-local %v, repair %v; want %d %v %v",
			len(p.reReserve), p.releaseHostLocal, p.repairIndexes, tc.wantPlanned, tc.wantHostLocal, tc.wantRepair)
	}
	if tc.dryRun && !p.empty() {
		t.Errorf("a dry run planned writes: %+v", p)
	}
}
