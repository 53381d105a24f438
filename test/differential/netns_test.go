package differential

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// hangGuard bounds one plugin process: a guard against a hung plugin, never
// an assertion of how fast it is; generous for a loaded machine.
const hangGuard = 2 * time.Minute

// netnsKind is one kind of CNI_NETNS value a runtime (or whoever can write
// its netns dir) may pass.
type netnsKind struct {
	name string
	// make returns the CNI_NETNS value, creating what it names in dir.
	make func(t *testing.T, dir string) string
	// fifo: host-local is run with a writer holding the FIFO open, so that
	// skel's blocking open returns and host-local gives the answer it gives
	// once that open returns; hostlease is run without one.
	fifo bool
}

func netnsKinds() []netnsKind {
	mkfifo := func(t *testing.T, p string) {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return []netnsKind{
		{name: "fifo", fifo: true, make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "fifo")
			mkfifo(t, p)
			return p
		}},
		{name: "symlink to fifo", fifo: true, make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "fifo")
			mkfifo(t, p)
			l := filepath.Join(dir, "link")
			if err := os.Symlink(p, l); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "unix socket", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "sock")
			ln, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return p
		}},
		{name: "character device", make: func(*testing.T, string) string { return "/dev/null" }},
		{name: "directory", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "dir")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{name: "dangling symlink", make: func(t *testing.T, dir string) string {
			l := filepath.Join(dir, "dangling")
			if err := os.Symlink(filepath.Join(dir, "missing"), l); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "nonexistent", make: func(_ *testing.T, dir string) string { return filepath.Join(dir, "missing") }},
		{name: "regular file", make: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		// The plugin's own namespace: skel's check fails the verb after its
		// work is done, with error 8.
		{name: "own netns", make: func(*testing.T, string) string { return "/proc/self/ns/net" }},
	}
}

// netnsOutcome is what a runtime sees from one call: the exit status and
// every JSON document on stdout (a verb that fails skel's netns check after
// its work prints its result and then the error).
type netnsOutcome struct {
	exit int
	docs []any
	raw  string
}

// runNetns runs one CNI call of p with CNI_NETNS=netns, failing the test as
// hung if the process does not exit within hangGuard.
func (p plugin) runNetns(t *testing.T, c config, cmdName, id, netns string) netnsOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin)
	cmd.WaitDelay = time.Second
	cmd.Stdin = bytes.NewReader(c.render(p, op{cmd: cmdName, containerID: id, ifname: "eth0"}))
	cmd.Env = []string{
		"CNI_COMMAND=" + cmdName,
		"CNI_CONTAINERID=" + id,
		"CNI_NETNS=" + netns,
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + binDir,
		"PATH=/usr/bin:/bin",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("hung: %s %s with CNI_NETNS=%q did not exit within the %s hang guard (stdout %q, stderr %q)",
			p.name, cmdName, netns, hangGuard, stdout.String(), stderr.String())
	}
	out := netnsOutcome{raw: stdout.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		out.exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", p.name, cmdName, err)
	}
	dec := json.NewDecoder(&stdout)
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s %s with CNI_NETNS=%q: stdout is not a sequence of JSON documents: %v: %q", p.name, cmdName, netns, err, out.raw)
		}
		out.docs = append(out.docs, v)
	}
	return out
}

// Every kind of CNI_NETNS gets from hostlease, promptly, the answer
// host-local gives for ADD, CHECK and DEL (exit status, result, CNI error
// code and message) and leaves the same reservations. skel's check that
// CNI_NETNS is not the plugin's own namespace opens it with a blocking
// open(2); host-local (the same skel) waits there forever on a FIFO without
// a writer, so it is asked with a writer present: its answer once the open
// returns is the one hostlease must give without one.
func TestOddNetnsSameAnswerAsHostLocal(t *testing.T) {
	for i, k := range netnsKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c := config{name: "netnskinds", version: "1.0.0", sets: 1, ipam: `"ranges":[[{"subnet":"10.81.0.0/24"}]]`}
			hlp, hlease := newPlugins(t)
			netns := k.make(t, t.TempDir())
			id := "ctr-" + string(rune('a'+i))
			for _, verb := range []string{"ADD", "CHECK", "DEL"} {
				var want netnsOutcome
				func() {
					if k.fifo {
						// O_RDWR opens a FIFO without waiting for a reader.
						w, err := os.OpenFile(netns, os.O_RDWR, 0)
						if err != nil {
							t.Fatal(err)
						}
						defer w.Close()
					}
					want = hlp.runNetns(t, c, verb, id, netns)
				}()
				got := hlease.runNetns(t, c, verb, id, netns)
				if got.exit != want.exit || !reflect.DeepEqual(got.docs, want.docs) {
					t.Fatalf("%s with CNI_NETNS=%q (%s):\nhost-local exit %d: %s\nhostlease  exit %d: %s",
						verb, netns, k.name, want.exit, want.raw, got.exit, got.raw)
				}
				sameState(t, c, hlp, hlease, 0)
			}
		})
	}
}
