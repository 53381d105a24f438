package storereplace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/gcproc"
	"github.com/hostlease/hostlease/internal/testing/leasecheck"
	"github.com/hostlease/hostlease/internal/testing/proclocks"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// startDaemon runs `hostlease-gc run` sweeping every second until the test
// ends. Records are never old enough to be reclaimed (the default
// --min-age): what the daemons do here is read, set aside and rebuild.
func (n *node) startDaemon() *gcproc.Daemon {
	t := n.t
	t.Helper()
	d, err := gcproc.Start(gcBin(), []string{"run",
		"--cri-endpoint", n.cri.Endpoint(), "--data-dir", n.dataDir, "--netns-dir", n.netnsDir,
		"--interval", "1s", "--no-api", "--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("hostlease-gc log:\n%s", strings.Join(d.Lines(), "\n"))
		}
	})
	return d
}

// setAside lists the set-aside files of network's store.
func (n *node) setAside(network string) []string {
	m, _ := filepath.Glob(store.FilePath(n.dataDir, network) + ".corrupt-*")
	return m
}

// Many first uses of new networks (each creates its store) beside two
// daemons sweeping the same data dir every second, then stores made
// unreadable (cut short) that both daemons find at once (both wait for the
// store's lock, held by the test, before either reads it) while ADDs keep
// trying them. It guarantees:
//   - no daemon ever sets aside a store a plugin is creating (a store is
//     linked into place only once complete): no network that was not damaged
//     has a set-aside file;
//   - a store damaged once is set aside and rebuilt once, though two daemons
//     judged it unreadable (the second finds, under the lock, that it no
//     longer needs it), and no daemon's rebuild fails;
//   - no acknowledged ADD is lost (the rebuild restores them from the
//     runtime) and no address is held twice (internal/testing/leasecheck).
func TestFirstUsesBesideDaemons(t *testing.T) {
	const (
		networks = 200
		workers  = 4
		damaged  = 5 // every networks/damaged-th network is cut short
	)
	n := newNode(t)
	d1, d2 := n.startDaemon(), n.startDaemon()
	name := func(k int) string { return fmt.Sprintf("fu-%03d", k) }
	conf := func(k int) []byte { return n.conf(name(k), fmt.Sprintf("10.%d.%d.0/24", 100+k/256, k%256)) }

	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range next {
				c := conf(k)
				var first *leasecheck.Holding
				for i := range 3 {
					id := fmt.Sprintf("%s-%d", name(k), i)
					h, _, o := n.add(id, c, "")
					if !o.OK() {
						n.fail("ADD %s (first uses of %s): %s", id, name(k), o)
						continue
					}
					if first == nil {
						first = h
					}
				}
				if first != nil {
					n.del(first, c)
				}
			}
		})
	}
	for k := range networks {
		next <- k
	}
	close(next)
	wg.Wait()

	// Cut some stores short: unreadable. Both daemons find each at once:
	// the test holds the store's lock until both wait for it (the window
	// widened: they read it, judge it and rebuild it side by side). ADDs
	// keep trying (refused with error 11 until the rebuild) and then succeed.
	var cut []int
	for k := 0; k < networks; k += networks / damaged {
		cut = append(cut, k)
		path := store.FilePath(n.dataDir, name(k))
		held := lockPath(t, path)
		if err := os.Truncate(path, 8192); err != nil {
			t.Fatal(err)
		}
		ino := inode(t, path)
		waitFor(t, "both daemons waiting for the lock of "+path, func() bool {
			return proclocks.Waiting(d1.Cmd.Process.Pid, ino) && proclocks.Waiting(d2.Cmd.Process.Pid, ino)
		})
		held.Close()
	}
	for _, k := range cut {
		wg.Go(func() {
			id := name(k) + "-after"
			for range 10 * 60 * 2 { // a hang guard of about two minutes
				_, _, o := n.add(id, conf(k), "")
				if o.OK() {
					return
				}
				if o.Err == nil || o.Err.Code != 11 {
					n.fail("ADD %s on a store being rebuilt: %s", id, o)
					return
				}
				time.Sleep(100 * time.Millisecond) // poll: the daemons sweep every second
			}
			n.fail("hung: ADD %s never succeeded: the store was not rebuilt", id)
		})
	}
	wg.Wait()

	for i, d := range []*gcproc.Daemon{d1, d2} {
		for _, e := range d.Entries("store unreadable and rebuild failed") {
			// A daemon that waited longer than its store lock timeout for
			// the other's rebuild (a loaded machine) tries again next
			// sweep: that is the daemon's contract, not a failed rebuild.
			if msg, _ := e["error"].(string); strings.Contains(msg, store.ErrLockTimeout.Error()) {
				t.Logf("daemon %d: %v: %v (retried next sweep)", i+1, e["network"], msg)
				continue
			}
			t.Errorf("daemon %d: rebuild of %v failed: %v", i+1, e["network"], e["error"])
		}
	}
	isCut := map[int]bool{}
	for _, k := range cut {
		isCut[k] = true
	}
	var all []string
	for k := range networks {
		all = append(all, name(k))
		switch aside := n.setAside(name(k)); {
		case isCut[k] && len(aside) != 1:
			t.Errorf("store of %s damaged once, set aside %d times: %v", name(k), len(aside), aside)
		case !isCut[k] && len(aside) != 0:
			t.Errorf("store of %s, never damaged, was set aside: %v (a daemon saw it incomplete)", name(k), aside)
		}
	}
	n.judge(fmt.Sprintf("%d first uses and %d unreadable stores beside two daemons", networks, len(cut)), all...)
}
