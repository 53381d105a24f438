package reclaim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

func TestPredatesBoot(t *testing.T) {
	boot := t0
	cases := []struct {
		name               string
		created, boot, now time.Time
		want               bool
	}{
		{"written before the boot", boot.Add(-time.Hour), boot, boot.Add(time.Hour), true},
		{"written a second before the boot", boot.Add(-time.Second), boot, boot.Add(time.Hour), true},
		{"written at the boot", boot, boot, boot.Add(time.Hour), false},
		{"written after the boot", boot.Add(time.Minute), boot, boot.Add(time.Hour), false},
		{"unknown boot time", boot.Add(-time.Hour), time.Time{}, boot, false},
		{"a boot time in the future cannot be right", boot.Add(-time.Hour), boot, boot.Add(-time.Minute), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PredatesBoot(tc.created, tc.boot, tc.now); got != tc.want {
				t.Fatalf("PredatesBoot = %v, want %v", got, tc.want)
			}
		})
	}
}

// netnsDoubt is the per-record rule: only a witness with --netns-dir's
// identity lets a missing netns prove a death, and a READY sandbox's missing
// netns still vetoes it.
func TestNetnsDoubt(t *testing.T) {
	runtimeDir := allocator.DirID{Dev: 25, Ino: 1000, Handle: "\x01\x00\x00\x00gen1"}
	view := NetnsDirView{Dir: "/var/run/netns", ID: runtimeDir}
	seen := allocator.NetnsWitness{Dir: runtimeDir, Existed: true, Netns: allocator.NsID{Dev: 4, Ino: 4026532177}}
	rec := func(netns string, w allocator.NetnsWitness) *allocator.Record {
		return &allocator.Record{Netns: netns, NetnsWitness: w}
	}
	cases := []struct {
		name        string
		r           *allocator.Record
		view        NetnsDirView
		liveMissing int
		provable    bool
		doubt       string // a part of the doubt; "" for none
	}{
		{"identity matches", rec("/var/run/netns/cni-1", seen), view, 0, true, ""},
		{"identity matches but a READY sandbox's netns is missing", rec("/var/run/netns/cni-1", seen), view, 2, false, "2 READY sandboxes' netns are missing"},
		{"identity mismatch: an empty tmpfs over --netns-dir", rec("/var/run/netns/cni-1", seen), NetnsDirView{Dir: view.Dir, ID: allocator.DirID{Dev: 77, Ino: 1}}, 0, false, "is directory 77:1, not 25:1000"},
		{"identity mismatch: a typo'd hostPath created empty", rec("/var/run/netns/cni-1", seen), NetnsDirView{Dir: view.Dir, ID: allocator.DirID{Dev: 25, Ino: 1001}}, 0, false, "a wrong mount"},
		{"same numbers, another handle: a tmpfs mounted in place of the plugin's", rec("/var/run/netns/cni-1", seen), NetnsDirView{Dir: view.Dir, ID: allocator.DirID{Dev: 25, Ino: 1000, Handle: "\x01\x00\x00\x00gen2"}}, 0, false, "a wrong mount"},
		{"an older plugin's witness: numbers only", rec("/var/run/netns/cni-1", allocator.NetnsWitness{Dir: allocator.DirID{Dev: 25, Ino: 1000}, Existed: true}), view, 0, false, "which the kernel reuses"},
		{"missing identity: the netns existed nowhere the plugin could see", rec("/var/run/netns/cni-1", allocator.NetnsWitness{Dir: runtimeDir}), view, 0, false, "did not exist when the record was written"},
		{"legacy record (no witness)", rec("/var/run/netns/cni-1", allocator.NetnsWitness{}), view, 0, false, "written by an older plugin"},
		{"--netns-dir unreadable", rec("/var/run/netns/cni-1", seen), NetnsDirView{Dir: view.Dir, Err: errors.New("no such file or directory")}, 0, false, "cannot be read: no such file"},
		{"netns outside --netns-dir", rec("/run/other/cni-1", seen), view, 0, false, "not in --netns-dir /var/run/netns"},
		{"no netns: nothing to doubt", rec("", allocator.NetnsWitness{}), view, 0, false, ""},
		{"a /proc netns: nothing to doubt", rec("/proc/7/ns/net", allocator.NetnsWitness{}), view, 0, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := allocator.NetnsEvidenceOf(tc.r, tc.view.Dir, tc.view.ID)
			provable, doubt := JudgeNetns(e, tc.r, tc.view, tc.liveMissing)
			if provable != tc.provable || (tc.doubt == "") != (doubt == "") || !strings.Contains(doubt, tc.doubt) {
				t.Fatalf("JudgeNetns(%v) = %v, %q; want %v, %q", e, provable, doubt, tc.provable, tc.doubt)
			}
		})
	}
}

// NetnsProof is the node-wide verdict, one per sweep: positive evidence
// turns the proof on; an unreadable, wrong or unknown directory leaves it off
// and says why.
func TestNetnsProof(t *testing.T) {
	id := allocator.DirID{Dev: 25, Ino: 1000}
	view := NetnsDirView{Dir: "/var/run/netns", ID: id}
	facts := func(kv ...any) NetnsFacts {
		f := NetnsFacts{Evidence: map[allocator.NetnsEvidence]int{}}
		for i := 0; i+1 < len(kv); i += 2 {
			f.Evidence[kv[i].(allocator.NetnsEvidence)] = kv[i+1].(int)
		}
		return f
	}
	withOther := facts(allocator.NetnsOtherDir, 3)
	withOther.OtherDir = allocator.DirID{Dev: 25, Ino: 999}
	live := facts(allocator.NetnsProvable, 4)
	live.LiveMissing = 1
	cases := []struct {
		name       string
		view       NetnsDirView
		nets       []NetnsFacts
		state      string
		verified   bool
		warn       bool
		unverified int
		why        string
	}{
		{"identity match on one network of many", view, []NetnsFacts{facts(allocator.NetnsUnnamed, 2), facts(allocator.NetnsProvable, 1, allocator.NetnsNoWitness, 5)},
			NetnsProofVerified, true, false, 5, "the one the plugin records"},
		{"identity match beside records of an older directory", view, []NetnsFacts{facts(allocator.NetnsProvable, 1), withOther}, NetnsProofVerified, true, false, 3, ""},
		{"identity mismatch (a wrong mount)", view, []NetnsFacts{withOther}, NetnsProofOtherDir, false, true, 3, "saw the netns of 3 records in directory 25:999"},
		{"missing identity only (legacy records)", view, []NetnsFacts{facts(allocator.NetnsNoWitness, 7)}, NetnsProofNoWitness, false, false, 7, "older plugin"},
		{"netns never existed", view, []NetnsFacts{facts(allocator.NetnsNeverExisted, 1)}, NetnsProofNoWitness, false, false, 1, ""},
		{"netns outside --netns-dir", view, []NetnsFacts{facts(allocator.NetnsElsewhere, 2)}, NetnsProofElsewhere, false, true, 2, "not in --netns-dir"},
		{"no record names a netns (a new node)", view, []NetnsFacts{facts(allocator.NetnsUnnamed, 3)}, NetnsProofNoNetns, false, false, 0, "first one"},
		{"no network at all", view, nil, NetnsProofNoNetns, false, false, 0, ""},
		{"--netns-dir unreadable", NetnsDirView{Dir: "/x", Err: errors.New("ENOENT")}, []NetnsFacts{facts(allocator.NetnsDirUnseen, 4)}, NetnsProofUnreadable, false, true, 4, "cannot be read (ENOENT), and 4 records"},
		{"a READY sandbox's netns missing", view, []NetnsFacts{live}, NetnsProofLiveMissing, false, true, 4, "1 READY sandboxes"},
		{"--netns-dir unreadable, no record needs it", NetnsDirView{Dir: "/x", Err: errors.New("ENOENT")}, []NetnsFacts{facts(allocator.NetnsNoWitness, 2)}, NetnsProofNoWitness, false, false, 2, "cannot be read: ENOENT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := NetnsProof(tc.view, tc.nets)
			if st.State != tc.state || st.Verified != tc.verified || st.Warn() != tc.warn || st.Unverified != tc.unverified || !strings.Contains(st.Why, tc.why) {
				t.Fatalf("NetnsProof = %+v (warn %v); want state %s verified %v warn %v unverified %d why ~%q", st, st.Warn(), tc.state, tc.verified, tc.warn, tc.unverified, tc.why)
			}
		})
	}
	// The state logged once is the same from sweep to sweep while only the
	// counts change.
	a := NetnsProof(view, []NetnsFacts{withOther})
	b := NetnsProof(view, []NetnsFacts{withOther, withOther})
	if a.Key != b.Key {
		t.Fatalf("state key changed with the counts: %q, %q", a.Key, b.Key)
	}
}

func TestGuardLimit(t *testing.T) {
	cases := []struct {
		fraction float64
		reserved int
		want     int
	}{
		{0.5, 100, 50},
		{0.5, 3, 1},
		{0.5, 2, 1},
		{0.5, 1, 1},
		{0.5, 0, 1},
		{0.01, 10, 1},
		{1, 7, 7},
		{0.57, 100, 57},
		{0.29, 100, 29},
		{0, 100, 0},
	}
	for _, tc := range cases {
		if got := GuardLimit(tc.fraction, tc.reserved); got != tc.want {
			t.Errorf("GuardLimit(%g, %d) = %d, want %d", tc.fraction, tc.reserved, got, tc.want)
		}
	}
}
