package main

import (
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// stdinThen answers the confirmation prompt with answer, after running
// change: what happens on the node while the operator reads the prompt.
type stdinThen struct {
	change func()
	answer io.Reader
}

func (s *stdinThen) Read(p []byte) (int, error) {
	if s.change != nil {
		s.change()
		s.change = nil
	}
	return s.answer.Read(p)
}

// release frees only what it showed: when the address changed hands while
// the operator read the prompt (the pod was deleted, another pod got the same
// address), the new owner's allocation is left alone, the command says so
// and exits 1.
func TestReleaseLeavesAnAddressThatChangedHands(t *testing.T) {
	f := newFixture(t)
	old := f.ids["bbbb2222"]
	ip := f.alpha[old]
	path := store.FilePath(f.dir, "alpha")
	next := sandboxID("ffff6666")
	prev := stdin
	t.Cleanup(func() { stdin = prev })
	stdin = &stdinThen{answer: strings.NewReader("y\n"), change: func() {
		c, err := netconf.Load(netConf(f.dir, "alpha"), "")
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(path, store.OpenOptions{LockTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Update(func(tx *store.Tx) error {
			if _, err := allocator.Release(tx, old, "eth0", allocator.Why{Reason: "pod deleted", By: "plugin"}, time.Now()); err != nil {
				return err
			}
			_, cerr := allocator.Allocate(tx, allocator.AllocateRequest{Network: "alpha", RangeSets: c.RangeSets, Now: time.Now(),
				Requested: []netip.Addr{ip}, Owner: allocator.Owner{ContainerID: next, IfName: "eth0"}})
			if cerr != nil {
				return cerr
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}}

	out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--network", "alpha", ip.String())
	if code != exitFailed || !strings.Contains(out, "sandbox "+old) || !strings.Contains(errOut, ip.String()+" changed since it was shown; not released") ||
		!strings.Contains(out, "released 0 address(es)") {
		t.Errorf("release of an address that changed hands: exit %d\n%s%s", code, out, errOut)
	}
	if rec := f.records(t, "alpha")[ip]; rec.ContainerID != next {
		t.Errorf("the new owner's allocation of %s was touched: %+v", ip, rec)
	}
}
