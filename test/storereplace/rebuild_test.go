package storereplace

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// damageRecord overwrites the stored value of ip's record with bytes that do
// not decode (the file still opens: the runbook's "rebuild" case), under the
// store file's lock as any writer.
func damageRecord(t *testing.T, path string, ip netip.Addr) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: hangGuard})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a := ip.As4()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("allocs")).Put([]byte{4, a[0], a[1], a[2], a[3]}, []byte{0xff, 0x01})
	}); err != nil {
		t.Fatal(err)
	}
}

// `hostlease-gc rebuild` in a loop beside concurrent ADD/DEL plugin
// processes, as an operator runs it: with --force on a healthy store, and the
// runbook's path (a record damaged, then rebuild without --force). The fake
// runtime lists every sandbox whose ADD was acknowledged and whose DEL has not
// started, so a rebuild restores them.
//
// Each round widens the race window deterministically: an ADD is stopped
// (SIGSTOP) once it holds the store file open and waits for its lock, the
// rebuild runs to its end, and the ADD is continued: it must find that its
// file is no longer the store and allocate in the rebuilt one. Then an ADD of
// another sandbox asks for the very address the first one got (IP= in
// CNI_ARGS): it must be refused. Without the identity proof, the first ADD
// commits into the set-aside file (lost) and the second gets its address
// (held twice), every round.
//
// Guarantees, judged by internal/testing/leasecheck over all the processes: no
// acknowledged ADD missing from the store at the end, no address held by two
// sandboxes at once, every plugin call and every rebuild succeeds.
func TestRebuildBesideAddDel(t *testing.T) {
	for _, c := range []struct {
		name  string
		force bool
	}{{"force", true}, {"damaged", false}} {
		t.Run(c.name, func(t *testing.T) { rebuildLoop(t, c.force) })
	}
}

func rebuildLoop(t *testing.T, force bool) {
	const (
		rounds  = 12
		workers = 4
		network = "swapnet"
		minOps  = 800 // plugin operations at least, beside the rounds
	)
	n := newNode(t)
	conf := n.conf(network, "10.66.0.0/22")
	path := store.FilePath(n.dataDir, network)
	if _, _, o := n.add("first", conf, ""); !o.OK() {
		t.Fatalf("first ADD: %s", o)
	}

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		keptMu  sync.Mutex
		kept    []netip.Addr // addresses of acknowledged ADDs never released
		seq     atomic.Int64
		rebuilt int
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%05d", w, seq.Add(1))
				h, ip, o := n.add(id, conf, "")
				if !o.OK() {
					n.fail("ADD %s: %s", id, o)
					continue
				}
				if i%5 == 0 {
					keptMu.Lock()
					kept = append(kept, ip)
					keptMu.Unlock()
					continue
				}
				n.del(h, conf)
			}
		})
	}
	waitFor(t, "a first ADD kept", func() bool {
		keptMu.Lock()
		defer keptMu.Unlock()
		return len(kept) > 0
	})
	for r := range rounds {
		if !force {
			// The runbook's path: a record is damaged, the operator rebuilds.
			keptMu.Lock()
			var victim netip.Addr
			if len(kept) > 0 {
				victim = kept[r%len(kept)]
			}
			keptMu.Unlock()
			if victim.IsValid() {
				damageRecord(t, path, victim)
			}
		}
		id := fmt.Sprintf("stopped-%02d", r)
		cmd, stdout, stderr, start := n.stopWhileWaiting(path, id, conf)
		args := []string{"rebuild", "--data-dir", n.dataDir, "--network", network, "--cri-endpoint", n.cri.Endpoint()}
		if force {
			args = append(args, "--force")
		}
		code, out := gc(args...)
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			n.fail("rebuild round %d: exit %d: %s", r, code, out)
		} else {
			rebuilt++
		}
		o := finish(cmd, stdout, stderr, start)
		if !o.OK() {
			n.fail("ADD %s (stopped across the rebuild): %s", id, o)
			continue
		}
		_, ip := n.acked(id, o, start)
		if !ip.IsValid() {
			continue
		}
		// Another sandbox asks for that very address: it is held.
		twin := fmt.Sprintf("twin-%02d", r)
		if _, _, o := n.add(twin, conf, ";IP="+ip.String()); o.OK() {
			t.Logf("round %d: ADD %s was given %s, which %s holds", r, twin, ip, id)
		}
	}
	for n.operations() < minOps && !t.Failed() {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d of %d rebuilds succeeded", rebuilt, rounds)
	n.judge(fmt.Sprintf("rebuild (force %v) x%d beside ADD/DEL", force, rounds), network)
}

// The scenario as it was met: 25 `rebuild --force` back to back
// beside 8 processes adding 240 sandboxes, nothing stopped. Every ADD
// acknowledged is in the store at the end and no address is held twice.
// (A rebuild that reads and renames without the old file's lock loses ADDs
// acknowledged meanwhile and hands their addresses out twice.)
func TestRebuildForceBesideAdds(t *testing.T) {
	const network = "burst"
	n := newNode(t)
	conf := n.conf(network, "10.67.0.0/22")
	if _, _, o := n.add("first", conf, ""); !o.OK() {
		t.Fatalf("first ADD: %s", o)
	}
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := seq.Add(1); i <= 240; i = seq.Add(1) {
				id := fmt.Sprintf("b%d-%03d", w, i)
				if _, _, o := n.add(id, conf, ""); !o.OK() {
					n.fail("ADD %s: %s", id, o)
				}
			}
		})
	}
	for r := range 25 {
		if code, out := gc("rebuild", "--data-dir", n.dataDir, "--network", network, "--cri-endpoint", n.cri.Endpoint(), "--force"); code != 0 {
			n.fail("rebuild %d: exit %d: %s", r, code, out)
		}
	}
	wg.Wait()
	n.judge("25 rebuild --force beside 240 ADDs", network)
}
