package harness

import (
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// When a test binary is stopped with SIGINT or SIGTERM (make interrupted, CI
// cancelling a run), no t.Cleanup runs. The runtimes the tests started die
// with the binary (Pdeathsig), but what they started themselves does not: a
// containerd shim or CRI-O's conmon has daemonized away from its parent, and
// keeps its containers, mounts and bridges. OnInterrupt's teardowns run on the
// first such signal, newest first, before the binary exits; a second signal
// kills the binary at once (the default action, restored on the first).

var interrupt struct {
	once sync.Once
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// OnInterrupt registers teardown to run if the binary is stopped by SIGINT or
// SIGTERM, and returns the function that unregisters it (call it once the
// teardown has run by the ordinary path). teardown may run concurrently with
// tests still running, so it must be safe to call at most once from any
// goroutine: wrap the ordinary cleanup in a sync.Once shared by both paths.
func OnInterrupt(teardown func()) (unregister func()) {
	interrupt.once.Do(func() {
		interrupt.fns = map[int]func(){}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			signal.Reset(syscall.SIGINT, syscall.SIGTERM)
			runInterruptTeardowns(sig)
		}()
	})
	interrupt.mu.Lock()
	defer interrupt.mu.Unlock()
	id := interrupt.next
	interrupt.next++
	interrupt.fns[id] = teardown
	return func() {
		interrupt.mu.Lock()
		defer interrupt.mu.Unlock()
		delete(interrupt.fns, id)
	}
}

// runInterruptTeardowns runs the registered teardowns, newest first, and
// exits with the shell's code for the signal.
func runInterruptTeardowns(sig os.Signal) {
	interrupt.mu.Lock()
	fns := interrupt.fns
	interrupt.fns = map[int]func(){}
	interrupt.mu.Unlock()
	ids := slices.Sorted(maps.Keys(fns))
	fmt.Fprintf(os.Stderr, "e2e: %v: tearing down %d test environment(s) before exiting\n", sig, len(ids))
	for _, id := range slices.Backward(ids) {
		fns[id]()
	}
	code := 130
	if sig == syscall.SIGTERM {
		code = 143
	}
	os.Exit(code)
}

// StderrLogf is a logf for teardowns that run after their test is gone (an
// interrupt): each line goes to stderr with prefix.
func StderrLogf(prefix string) func(string, ...any) {
	return func(f string, a ...any) { fmt.Fprintf(os.Stderr, prefix+f+"\n", a...) }
}
