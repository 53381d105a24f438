package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// holdLock takes alpha's store lock as a plugin's ADD holds it, until the
// returned function is called (or the test ends).
func holdLock(t *testing.T, f *fixture) func() {
	t.Helper()
	l, err := store.LockFile(store.FilePath(f.dir, "alpha"), store.LockOptions{Exclusive: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			l.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// Every command that opens a store waits for its lock as long as
// --lock-timeout says, then names the store and the wait; the store is left
// as it was.
func TestLockTimeoutIsEachCommands(t *testing.T) {
	f := newFixture(t)
	ip := f.alpha[f.ids["aaaa1111"]].String()
	hlDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(hlDir, "alpha"), 0o700); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, f)
	for _, args := range [][]string{
		{"status"},
		{"list", "-n", "alpha"},
		{"audit", "-n", "alpha"},
		{"release", ip, "-n", "alpha", "--yes"},
		{"export", "-n", "alpha", "--host-local-dir", t.TempDir()},
		{"import", "-n", "alpha", "--host-local-dir", hlDir},
	} {
		t.Run(args[0], func(t *testing.T) {
			args := append(args, "--data-dir", f.dir, "--lock-timeout", "150ms")
			out, errOut, code := cli(t, args...)
			// status names it in the store's ERROR row, the others on stderr.
			if code != exitFailed || !strings.Contains(out+errOut, "timed out waiting for the store lock (150ms)") {
				t.Errorf("%s with alpha's lock held: exit %d, want %d naming the 150ms wait; output:\n%s%s", args, code, exitFailed, out, errOut)
			}
		})
	}
	release()
	if got := f.records(t, "alpha"); len(got) != len(f.alpha) {
		t.Errorf("alpha holds %d records after the timed-out commands, want %d", len(got), len(f.alpha))
	}
}

// A command started while a plugin holds the lock reads the store once the
// lock is released within --lock-timeout.
func TestLockTimeoutWaitsForTheHolder(t *testing.T) {
	f := newFixture(t)
	release := holdLock(t, f)
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := cli(t, "list", "-n", "alpha", "-o", "json", "--data-dir", f.dir, "--lock-timeout", "2m")
		done <- result{out, errOut, code}
	}()
	select {
	case r := <-done:
		t.Fatalf("list returned while the lock was held: exit %d\n%s", r.code, r.errOut)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	r := <-done
	if r.code != exitOK || strings.Count(r.out, `"ip"`) != len(f.alpha) {
		t.Errorf("list after the holder let go: exit %d, want %d records\n%s\n%s", r.code, len(f.alpha), r.out, r.errOut)
	}
}

// --lock-timeout must be a positive duration: anything else is a bad
// command line naming the flag, and nothing is read.
func TestLockTimeoutRefusesNonPositive(t *testing.T) {
	f := newFixture(t)
	for _, v := range []string{"0", "0s", "-1s", "soon", ""} {
		_, errOut, code := cli(t, "list", "--data-dir", f.dir, "--lock-timeout", v)
		if code != exitUsage || !strings.Contains(errOut, "--lock-timeout") {
			t.Errorf("list --lock-timeout %q: exit %d, want %d naming the flag; stderr:\n%s", v, code, exitUsage, errOut)
		}
	}
}
