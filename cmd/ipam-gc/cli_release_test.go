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
			if _, err := allocator.Release(tx, allocator.Attachment{ContainerID: old, IfName: "eth0"}, allocator.Why{Reason: "pod deleted", By: "plugin"}, time.Now()); err != nil {
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

func TestReleaseAsksForConfirmation(t *testing.T) {
	f := newFixture(t)
	id := f.ids["bbbb2222"]
	ip := f.alpha[id]

	for _, answer := range []string{"n\n", "\n", "", "nope\n"} {
		withStdin(t, answer)
		out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--network", "alpha", ip.String())
		if code == 0 || !strings.Contains(errOut, "not confirmed; nothing released") {
			t.Errorf("release answered %q: exit %d, stderr %q; want a refusal", answer, code, errOut)
		}
		if !strings.Contains(out, ip.String()+" held by pod default/web-bbbb, sandbox "+id) || !strings.Contains(out, "[y/N]") {
			t.Errorf("release did not show what it would release before asking:\n%s", out)
		}
		if _, ok := f.records(t, "alpha")[ip]; !ok {
			t.Fatalf("release answered %q released %s anyway", answer, ip)
		}
	}

	withStdin(t, "y\n")
	out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--network", "alpha", ip.String())
	if code != 0 || !strings.Contains(out, "released 1 address(es)") {
		t.Fatalf("release confirmed: exit %d\n%s%s", code, out, errOut)
	}
	recs := f.records(t, "alpha")
	if _, ok := recs[ip]; ok || len(recs) != 2 {
		t.Errorf("after release: %d records, %s still there: %v", len(recs), ip, recs)
	}
	var ev *allocator.AuditEvent
	for _, e := range auditOf(t, store.FilePath(f.dir, "alpha")) {
		if e.Action == "manual-release" {
			ev = &e
		}
	}
	if ev == nil || ev.IP != ip || ev.ContainerID != id || ev.By != "cli:release" || ev.Pod != "default/web-bbbb" {
		t.Errorf("audit log manual-release: %+v, want %s of %s by operator", ev, ip, id)
	}
}

// The usage line shows the IP before the flags; that order must work too.
func TestReleaseFlagsAfterIP(t *testing.T) {
	f := newFixture(t)
	ip := f.alpha[f.ids["aaaa1111"]]
	out, errOut, code := cli(t, "release", ip.String(), "--data-dir", f.dir, "--network", "alpha", "--yes")
	if code != 0 || !strings.Contains(out, "released 1 address(es)") {
		t.Fatalf("release IP --data-dir D --network N --yes: exit %d\n%s%s", code, out, errOut)
	}
	if _, ok := f.records(t, "alpha")[ip]; ok {
		t.Errorf("%s still allocated", ip)
	}
	if _, errOut, code := cli(t, "release", ip.String(), "10.1.0.11", "--data-dir", f.dir, "--yes"); code != 2 ||
		!strings.Contains(errOut, "exactly one of IP or --sandbox") {
		t.Errorf("release with two IPs: exit %d %q, want a usage error", code, errOut)
	}
}

func TestReleaseSandboxYes(t *testing.T) {
	f := newFixture(t)
	id := f.ids["dddd4444"]
	// --yes never reads stdin: a "n" there must not matter.
	withStdin(t, "n\n")
	out, errOut, code := cli(t, "release", "--data-dir", f.dir, "--sandbox", id, "--yes")
	if code != 0 || !strings.Contains(out, "released 2 address(es)") || strings.Contains(out, "[y/N]") {
		t.Fatalf("release --sandbox --yes: exit %d\n%s%s", code, out, errOut)
	}
	for _, ip := range f.beta[id] {
		if !strings.Contains(out, "beta "+ip.String()+" held by") {
			t.Errorf("release did not list %s:\n%s", ip, out)
		}
	}
	if recs := f.records(t, "beta"); len(recs) != 0 {
		t.Errorf("beta still holds %v", recs)
	}
	if recs := f.records(t, "alpha"); len(recs) != 3 {
		t.Errorf("release --sandbox touched another sandbox: alpha holds %d", len(recs))
	}
	n := 0
	for _, e := range auditOf(t, store.FilePath(f.dir, "beta")) {
		if e.Action == "manual-release" && e.ContainerID == id {
			n++
		}
	}
	if n != 2 {
		t.Errorf("audit log has %d manual-release entries for %s, want 2", n, id)
	}
}

func TestReleaseUnknown(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--network", "alpha", "10.1.0.99"}, "no allocation found for 10.1.0.99"},
		{[]string{"--sandbox", "feedface"}, "no allocation found for sandbox feedface"},
		{[]string{"--network", "gamma", "10.1.0.10"}, `no store for network "gamma"`},
	} {
		args := append([]string{"release", "--data-dir", f.dir, "--yes"}, tc.args...)
		_, errOut, code := cli(t, args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want 1 with %q", tc.args, code, errOut, tc.want)
		}
	}
	if recs := f.records(t, ""); len(recs) != 5 {
		t.Errorf("a failed release changed the stores: %d records", len(recs))
	}
}
