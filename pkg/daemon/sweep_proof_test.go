package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// touchNetns creates a netns file under the env's --netns-dir.
func (e *sweepEnv) touchNetns(name string) string {
	e.t.Helper()
	p := filepath.Join(e.netns, name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// A leak whose netns is gone from a trusted --netns-dir is reclaimed by the
// first sweep that misses its sandbox, however young; without that proof the
// same leak waits for --misses, --grace and --min-age.
func TestSweepProofNetnsGoneAtOnce(t *testing.T) {
	e := newSweepEnv(t, func(o *Options) { o.NetnsGrace = 0 })
	live := e.allocNetns("sb-live", t0.Add(-time.Hour), e.touchNetns("cni-live"))
	e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
	young := t0.Add(-time.Second)
	gone := e.allocNetns("sb-gone", young, filepath.Join(e.netns, "cni-gone"))
	noNetns := e.alloc("sb-nonetns", young)

	nr := e.net(e.sweepAt(t0))
	if len(nr.Reclaimed) != 1 || nr.Reclaimed[0].IP != gone.IP {
		t.Fatalf("first sweep reclaimed %v, want only %s", nr.Reclaimed, gone.IP)
	}
	if d := nr.Reclaimed[0]; d.Reason != reclaim.ReleaseNetnsGone || !strings.Contains(d.Detail, "proof of death") {
		t.Fatalf("decision %+v", d)
	}
	recs := e.records()
	if recs[live.IP] == nil || recs[noNetns.IP] == nil || recs[gone.IP] != nil {
		t.Fatalf("store: %v", recs)
	}
	if got := e.reclaims(reclaim.ReleaseNetnsGone); got != 1 {
		t.Fatalf("reclaims{netns_gone} = %v", got)
	}
	if got := recs[noNetns.IP].Obs.Verdict; got != "absent" {
		t.Fatalf("record without proof: verdict %q, want absent (waits for --misses)", got)
	}
}

// A missing netns proves nothing when --netns-dir cannot be the runtime's: it
// does not exist (no mount), or a READY sandbox's netns is missing there too
// (a wrong mount).
func TestSweepNetnsDirNotTrusted(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *sweepEnv)
	}{
		{"netns dir not visible", func(e *sweepEnv) { e.s.Opts.NetnsDir = filepath.Join(e.t.TempDir(), "absent") }},
		{"a READY sandbox's netns is missing", func(e *sweepEnv) {
			e.touchNetns("cni-unrelated")
			live := e.allocNetns("sb-live", t0.Add(-time.Hour), filepath.Join(e.netns, "cni-live"))
			e.cri.set("sb-live", reclaim.SandboxReady, live.IP)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newSweepEnv(t, func(o *Options) { o.NetnsGrace = 0; o.MaxReclaimFraction = 1 })
			tc.setup(e)
			leak := e.allocNetns("sb-gone", t0.Add(-time.Second), filepath.Join(e.netns, "cni-gone"))
			for i := range 2 {
				if nr := e.net(e.sweepAt(t0.Add(time.Duration(i) * time.Second))); len(nr.Reclaimed) != 0 {
					t.Fatalf("sweep %d reclaimed %v without trustworthy proof", i, nr.Reclaimed)
				}
			}
			if e.records()[leak.IP] == nil {
				t.Fatal("leak gone")
			}
		})
	}
}

// A node rebooted with a persistent data dir: every record written before the
// boot whose sandbox CRI does not list is reclaimed by the first sweep, all at
// once (no guard), while the pods started since keep theirs. Without a
// readable boot time the same records wait for the rules without proof.
func TestSweepRebootReclaimsStaleAtOnce(t *testing.T) {
	for _, readable := range []bool{true, false} {
		t.Run(fmt.Sprintf("boot time readable %v", readable), func(t *testing.T) {
			e := newSweepEnv(t, func(o *Options) { o.NetnsDir = filepath.Join(t.TempDir(), "none"); o.NetnsGrace = 0 })
			boot := t0.Add(-10 * time.Minute)
			e.s.Boot = fixedBoot{t: boot}
			if !readable {
				e.s.Boot = fixedBoot{err: errors.New("no /proc")}
			}
			var stale []*allocator.Record
			for i := range 20 {
				stale = append(stale, e.alloc(fmt.Sprintf("old-%d", i), boot.Add(-time.Hour)))
			}
			var live []*allocator.Record
			for i := range 3 {
				id := fmt.Sprintf("new-%d", i)
				r := e.alloc(id, boot.Add(time.Minute))
				e.cri.set(id, reclaim.SandboxReady, r.IP)
				live = append(live, r)
			}
			nr := e.net(e.sweepAt(t0))
			if !readable {
				if len(nr.Reclaimed) != 0 {
					t.Fatalf("reclaimed %d without proof at the first sweep", len(nr.Reclaimed))
				}
				return
			}
			if len(nr.Reclaimed) != len(stale) || nr.Verdict.Guarded {
				t.Fatalf("reclaimed %d (guarded %v), want all %d stale", len(nr.Reclaimed), nr.Verdict.Guarded, len(stale))
			}
			recs := e.records()
			for _, r := range live {
				if recs[r.IP] == nil {
					t.Fatalf("live %s reclaimed", r.IP)
				}
			}
			if len(recs) != len(live) {
				t.Fatalf("%d records left, want %d", len(recs), len(live))
			}
			if got := e.reclaims(reclaim.ReleasePredatesBoot); got != float64(len(stale)) {
				t.Fatalf("reclaims{predates_boot} = %v", got)
			}
		})
	}
}

// After a reboot the runtime may list nothing at all: with every committed
// record written before the boot that answer is plausible, and the stale
// records are reclaimed; a committed record written since keeps the empty
// answer implausible (nothing reclaimed).
func TestSweepRebootEmptyRuntime(t *testing.T) {
	for _, sinceBoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("a committed record since the boot %v", sinceBoot), func(t *testing.T) {
			e := newSweepEnv(t, func(o *Options) { o.NetnsDir = filepath.Join(t.TempDir(), "none"); o.NetnsGrace = 0 })
			boot := t0.Add(-10 * time.Minute)
			e.s.Boot = fixedBoot{t: boot}
			for i := range 5 {
				e.alloc(fmt.Sprintf("old-%d", i), boot.Add(-time.Hour))
			}
			e.update(func(tx *store.Tx) error {
				return tx.ForEach(func(r *allocator.Record) error {
					r.State = allocator.StateCommitted
					return tx.Put(r)
				})
			})
			if sinceBoot {
				id := "new"
				e.alloc(id, boot.Add(time.Minute))
				e.update(func(tx *store.Tx) error {
					_, err := allocator.MarkCommitted(tx, allocator.Attachment{ContainerID: id, IfName: "eth0"}, t0)
					return err
				})
			}
			rep := e.sweepAt(t0)
			nr := e.net(rep)
			if sinceBoot {
				if rep.CRI.Complete || len(nr.Reclaimed) != 0 {
					t.Fatalf("empty answer with a committed record since the boot: complete %v reclaimed %d", rep.CRI.Complete, len(nr.Reclaimed))
				}
				return
			}
			if !rep.CRI.Complete || len(nr.Reclaimed) != 5 {
				t.Fatalf("complete %v (%s) reclaimed %d, want 5", rep.CRI.Complete, rep.CRI.Why, len(nr.Reclaimed))
			}
		})
	}
}

// A daemon pointed at a wrong socket on a default node: the runtime answers
// with sandboxes that are none of ours while 100 pods hold addresses of a
// /24. However long it runs, it reclaims nothing and trips the guard.
func TestSweepWrongSocketReclaimsNothing(t *testing.T) {
	e := newSweepEnv(t)
	e.ranges = []allocator.StoredRangeSet{{Ranges: []allocator.StoredRange{{
		Subnet: netip.MustParsePrefix("10.1.0.0/24"), Start: netip.MustParseAddr("10.1.0.1"),
		End: netip.MustParseAddr("10.1.0.254"), Gateway: netip.MustParseAddr("10.1.0.1"),
	}}}}
	for i := range 100 {
		id := fmt.Sprintf("pod-%d", i)
		e.allocNetns(id, t0.Add(-time.Hour), e.touchNetns("cni-"+id))
	}
	e.cri.set("someone-elses", reclaim.SandboxReady, netip.MustParseAddr("192.168.9.9"))
	for i := range 6 {
		nr := e.net(e.sweepAt(t0.Add(time.Duration(i) * 10 * time.Minute)))
		if len(nr.Reclaimed) != 0 {
			t.Fatalf("sweep %d reclaimed %d live addresses", i, len(nr.Reclaimed))
		}
	}
	if n := len(e.records()); n != 100 {
		t.Fatalf("%d records left, want 100", n)
	}
	if got := e.metric("hostlease_reclaim_guard_tripped_total", "network", testNet); got < 1 {
		t.Fatalf("guard never tripped")
	}
	if !strings.Contains(e.logs.String(), "MASS-RECLAIM GUARD") {
		t.Fatalf("no guard log:\n%s", e.logs.String())
	}
}

// A network whose name is too long for a file name has its store under a
// shortened name; the sweep reports it (metrics, logs) under its real name.
func TestSweepNamesLongNetworkByItsStore(t *testing.T) {
	e := newSweepEnv(t)
	long := strings.Repeat("n", 253)
	path := store.FilePath(e.dir, long)
	if filepath.Base(path) == long+".db" {
		t.Fatalf("StorePath did not shorten a %d-byte name", len(long))
	}
	st, err := store.Open(path, store.OpenOptions{Create: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(func(tx *store.Tx) error {
		_, cerr := allocator.Allocate(tx, allocator.AllocateRequest{Network: long, RangeSets: e.ranges,
			Owner: allocator.Owner{ContainerID: "sb-1", IfName: "eth0"}, Now: t0})
		if cerr != nil {
			return cerr
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rep := e.sweepAt(t0.Add(time.Minute))
	if len(rep.Networks) != 1 || rep.Networks[0].Network != long {
		t.Fatalf("networks %d, first %.20q...", len(rep.Networks), rep.Networks[0].Network)
	}
	if got := e.metric("hostlease_leak_candidates", "network", long); got != 1 {
		t.Fatalf("leak candidates under the real name = %v", got)
	}
}

// A store that turns unreadable while the runtime answers with no sandbox at
// all is not rebuilt from that answer when it held committed records when
// last read (the empty answer is implausible); it is once the runtime lists
// its sandboxes again.
func TestSweepNoRebuildFromEmptyAnswer(t *testing.T) {
	e := newSweepEnv(t)
	a := e.alloc("sb-a", t0.Add(-time.Hour))
	e.cri.set("sb-a", reclaim.SandboxReady, a.IP)
	e.sweepAt(t0) // commits sb-a's record
	e.sweepAt(t0.Add(time.Second))
	if err := os.Truncate(e.path, 0); err != nil {
		t.Fatal(err)
	}
	e.cri.remove("sb-a")
	rep := e.sweepAt(t0.Add(time.Minute))
	if nr := e.net(rep); rep.CRI.Complete || nr.Rebuilt != "" {
		t.Fatalf("rebuilt from an empty answer: complete %v rebuilt %q", rep.CRI.Complete, nr.Rebuilt)
	}
	e.cri.set("sb-a", reclaim.SandboxReady, a.IP)
	if nr := e.net(e.sweepAt(t0.Add(2 * time.Minute))); nr.Rebuilt == "" {
		t.Fatalf("not rebuilt once the runtime listed its sandbox: %v", nr.Err())
	}
	if recs := e.records(); recs[a.IP] == nil {
		t.Fatalf("rebuilt store %v", keys(recs))
	}
}

// replaceNetnsDir puts a new empty directory at --netns-dir's path, as a
// hostPath typo with DirectoryOrCreate or an empty tmpfs over it would: the
// same path, another directory. restore puts the runtime's back.
func (e *sweepEnv) replaceNetnsDir() (restore func()) {
	e.t.Helper()
	aside := e.netns + ".runtime"
	if err := os.Rename(e.netns, aside); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Mkdir(e.netns, 0o755); err != nil {
		e.t.Fatal(err)
	}
	return func() {
		e.t.Helper()
		if err := os.Remove(e.netns); err != nil {
			e.t.Fatal(err)
		}
		if err := os.Rename(aside, e.netns); err != nil {
			e.t.Fatal(err)
		}
	}
}

// A young leak whose netns is gone is reclaimed at once only when its record's
// witness proves --netns-dir is the directory the plugin saw it in; a record
// without a witness (written by an older plugin), one whose netns did not
// exist at ADD, or a --netns-dir that is another directory at the same path
// leave it to the rules without proof, and the decision says why.
func TestSweepNetnsWitness(t *testing.T) {
	cases := []struct {
		name    string
		witness func(e *sweepEnv, netns string) allocator.NetnsWitness
		swap    bool // replace --netns-dir by an empty directory after the ADD
		proven  bool
		doubt   string
	}{
		{"identity match", func(e *sweepEnv, ns string) allocator.NetnsWitness { return allocator.WitnessNetns(ns) }, false, true, ""},
		{"identity mismatch: an empty directory at --netns-dir's path", func(e *sweepEnv, ns string) allocator.NetnsWitness { return allocator.WitnessNetns(ns) }, true, false, "a wrong mount"},
		{"missing identity: the netns did not exist at ADD", func(e *sweepEnv, ns string) allocator.NetnsWitness {
			w := allocator.WitnessNetns(ns)
			w.Existed = false
			return w
		}, false, false, "did not exist when the record was written"},
		{"legacy record: no witness", func(*sweepEnv, string) allocator.NetnsWitness { return allocator.NetnsWitness{} }, false, false, "older plugin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newSweepEnv(t, func(o *Options) { o.NetnsGrace = 0; o.MaxReclaimFraction = 1 })
			netns := e.touchNetns("cni-gone")
			w := tc.witness(e, netns)
			recs, cerr := e.tryAlloc(allocator.Owner{ContainerID: "sb-gone", IfName: "eth0", Netns: netns, NetnsWitness: w}, t0.Add(-time.Second))
			if cerr != nil {
				t.Fatal(cerr)
			}
			if err := os.Remove(netns); err != nil { // the runtime tore it down
				t.Fatal(err)
			}
			if tc.swap {
				e.replaceNetnsDir()
			}
			nr := e.net(e.sweepAt(t0))
			if tc.proven {
				if len(nr.Reclaimed) != 1 || nr.Reclaimed[0].Reason != reclaim.ReleaseNetnsGone {
					t.Fatalf("reclaimed %+v, want %s as netns_gone", nr.Reclaimed, recs[0].IP)
				}
				return
			}
			if len(nr.Reclaimed) != 0 {
				t.Fatalf("reclaimed %+v without positive evidence", nr.Reclaimed)
			}
			d := nr.Verdict.Decisions[0]
			if d.Action != reclaim.Keep || !strings.Contains(d.Detail, "netns proof unavailable: ") || !strings.Contains(d.Detail, tc.doubt) {
				t.Fatalf("decision %v %s %q; want keep, saying the netns proof is unavailable (%s)", d.Action, d.Reason, d.Detail, tc.doubt)
			}
			if got := e.metric("hostlease_netns_unverified_records", "network", testNet); got != 1 {
				t.Fatalf("hostlease_netns_unverified_records = %v, want 1", got)
			}
		})
	}
}

// shmDir is a directory on tmpfs when the machine has one (a thousand stores
// cost no disk syncs there), else a temporary directory.
func shmDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "hostlease-gc-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// With 1 000 networks behind a wrong --netns-dir, the daemon says once (not
// once per network, nor once per sweep) that the netns proof is unavailable,
// reclaims nothing for a netns that only looks gone, and once the mount is
// right says once that the proof is on and reclaims every network's torn-down
// sandbox at once.
func TestSweepNetnsProofLoggedOncePerNode(t *testing.T) {
	const networks = 1000
	data := shmDir(t)
	e := newSweepEnv(t, func(o *Options) { o.DataDir = data; o.NetnsGrace = 0; o.MaxReclaimFraction = 1 })
	for i := range networks {
		network := fmt.Sprintf("net%04d", i)
		st, err := store.Open(store.FilePath(data, network), store.OpenOptions{Create: true, LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		live, gone := fmt.Sprintf("live-%d", i), fmt.Sprintf("gone-%d", i)
		liveNetns, goneNetns := e.touchNetns("cni-"+live), e.touchNetns("cni-"+gone)
		var liveIP netip.Addr
		if err := st.Update(func(tx *store.Tx) error {
			for _, o := range []allocator.Owner{{ContainerID: live, IfName: "eth0", Netns: liveNetns}, {ContainerID: gone, IfName: "eth0", Netns: goneNetns}} {
				o.NetnsWitness = allocator.WitnessNetns(o.Netns)
				recs, cerr := allocator.Allocate(tx, allocator.AllocateRequest{Network: network, RangeSets: e.ranges, Owner: o, Now: t0.Add(-time.Second)})
				if cerr != nil {
					return cerr
				}
				if o.ContainerID == live {
					liveIP = recs[0].IP
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		e.cri.set(live, reclaim.SandboxReady, liveIP)
		if err := os.Remove(goneNetns); err != nil {
			t.Fatal(err)
		}
	}
	const unavailable, on = "netns proof unavailable", "netns proof on"
	count := func(msg string) int { return strings.Count(e.logs.String(), `msg="`+msg) }

	restore := e.replaceNetnsDir()
	for i := range 3 {
		rep := e.sweepAt(t0.Add(time.Duration(i) * 15 * time.Second))
		for _, nr := range rep.Networks {
			if len(nr.Reclaimed) > 0 {
				t.Fatalf("sweep %d reclaimed %+v on %s behind a wrong --netns-dir", i, nr.Reclaimed, nr.Network)
			}
		}
		if rep.Netns.Verified || rep.Netns.State != reclaim.NetnsProofOtherDir {
			t.Fatalf("sweep %d: netns proof %+v, want other_dir", i, rep.Netns)
		}
	}
	if n := count(unavailable); n != 1 {
		t.Fatalf("%d %q lines over 3 sweeps of %d networks, want 1", n, unavailable, networks)
	}
	if got := e.metric("hostlease_netns_dir_verified"); got != 0 {
		t.Fatalf("hostlease_netns_dir_verified = %v, want 0", got)
	}
	if got := e.metric("hostlease_netns_unverified_records", "network", "net0999"); got != 2 {
		t.Fatalf("hostlease_netns_unverified_records{net0999} = %v, want 2", got)
	}

	restore()
	rep := e.sweepAt(t0.Add(time.Minute))
	reclaimed := 0
	for _, nr := range rep.Networks {
		for _, r := range nr.Reclaimed {
			if r.Reason != reclaim.ReleaseNetnsGone || !strings.HasPrefix(r.ContainerID, "gone-") {
				t.Fatalf("%s: reclaimed %s for %s", nr.Network, r.ContainerID, r.Reason)
			}
			reclaimed++
		}
	}
	if reclaimed != networks {
		t.Fatalf("reclaimed %d torn-down sandboxes, want %d", reclaimed, networks)
	}
	e.sweepAt(t0.Add(2 * time.Minute))
	if n, m := count(on), count(unavailable); n != 1 || m != 1 {
		t.Fatalf("%d %q and %d %q lines, want one each", n, on, m, unavailable)
	}
	if got := e.metric("hostlease_netns_dir_verified"); got != 1 {
		t.Fatalf("hostlease_netns_dir_verified = %v, want 1", got)
	}
}
