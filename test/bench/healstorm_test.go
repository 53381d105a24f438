package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

var (
	flagStormPods    = flag.Int("bench.storm-pods", 16, "pods retrying at once in BenchmarkHealStorm")
	flagStormRetries = flag.Int("bench.storm-retries", 12, "sandboxes per pod per round in BenchmarkHealStorm")
	flagStormThreads = flag.Int("bench.storm-threads", 3000, "idle threads BenchmarkHealStorm adds to the node (what /proc holds on a busy node: every one is a task the walk reads)")
	flagStormRounds  = flag.Int("bench.storm-rounds", 3, "interleaved rounds per build in BenchmarkHealStorm")
)

// BenchmarkHealStorm measures the #12130 storm the plugin heals: pods
// retrying at once on one network, each ADD releasing its pod's previous
// sandbox (its netns path removed, as the runtime does), so every ADD after
// a pod's first needs the walk of /proc for namespaces still held. It runs
// the plugin as built (the walk made with the store unlocked) and the same
// code built with -tags walkinlock (the walk inside the transaction),
// interleaved, on a node with -bench.storm-threads more tasks, and reports
// per build the storm's ADDs per second and how long a reader (the CLI's
// list) waited for the store's lock, as ratios of the walkinlock build's.
// Run with -benchtime 1x (make bench).
func BenchmarkHealStorm(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("the benchmark exec's the Linux plugin")
	}
	if b.N > 1 {
		return
	}
	root, err := moduleRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	builds := []string{"hostlease", "hostlease-walkinlock"}
	tags := map[string]string{"hostlease": "", "hostlease-walkinlock": "walkinlock"}
	for _, name := range builds {
		if err := build(root, "./cmd/ipam", filepath.Join(dir, name), tags[name]); err != nil {
			b.Fatal(err)
		}
	}
	stop := busyNode(*flagStormThreads)
	defer stop()

	type sample struct {
		addsPerSec float64
		waits      []time.Duration
		failed     int
		firstErr   error
	}
	res := map[string][]sample{}
	for round := range *flagStormRounds {
		for _, name := range builds {
			s, err := storm(filepath.Join(dir, name), filepath.Join(dir, fmt.Sprintf("%s-%d", name, round)))
			if err != nil {
				b.Fatal(err)
			}
			if s.firstErr != nil {
				progress("heal storm %s: first failed ADD: %v", name, s.firstErr)
			}
			res[name] = append(res[name], s)
			progress("heal storm %s round %d: %.0f ADDs/s, reader's lock wait p50 %v p99 %v, %d failed", name, round,
				s.addsPerSec, percentile(s.waits, 0.50), percentile(s.waits, 0.99), s.failed)
		}
	}
	base := res["hostlease-walkinlock"]
	fmt.Printf("\nHeal storm: %d pods x %d retries, %d extra tasks on the node, %d rounds (load %s)\n\n",
		*flagStormPods, *flagStormRetries, *flagStormThreads, *flagStormRounds, loadavg())
	fmt.Println("| build | ADDs/s (median round) | vs walkinlock | reader's lock wait p50 | p99 | p99 vs walkinlock | failed ADDs |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, name := range builds {
		rate, waits, failed := []float64{}, []time.Duration{}, 0
		for _, s := range res[name] {
			rate = append(rate, s.addsPerSec)
			waits = append(waits, s.waits...)
			failed += s.failed
		}
		var baseRate []float64
		var baseWaits []time.Duration
		for _, s := range base {
			baseRate = append(baseRate, s.addsPerSec)
			baseWaits = append(baseWaits, s.waits...)
		}
		fmt.Printf("| %s | %.0f | %.2fx | %v | %v | %.2fx | %d |\n", name, median(rate), median(rate)/median(baseRate),
			percentile(waits, 0.50), percentile(waits, 0.99), float64(percentile(waits, 0.99))/float64(max(percentile(baseWaits, 0.99), 1)), failed)
	}
}

// storm runs one storm with plugin in dir and returns what it measured.
func storm(plugin, dir string) (s struct {
	addsPerSec float64
	waits      []time.Duration
	failed     int
	firstErr   error
}, err error) {
	dataDir, netnsDir := filepath.Join(dir, "data"), filepath.Join(dir, "netns")
	for _, d := range []string{dataDir, netnsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return s, err
		}
	}
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "storm", "type": "bridge",
		"ipam": map[string]any{"type": "hostlease", "dataDir": dataDir,
			"ranges": [][]map[string]string{{{"subnet": "10.30.0.0/24"}}}}})
	add := func(pod string, i int) error {
		id := fmt.Sprintf("%s-%03d", pod, i)
		netns := filepath.Join(netnsDir, id)
		if err := os.WriteFile(netns, nil, 0o600); err != nil { // the sandbox's netns, as the runtime names it
			return err
		}
		if i > 0 { // the runtime tore the previous sandbox down
			if err := os.Remove(filepath.Join(netnsDir, fmt.Sprintf("%s-%03d", pod, i-1))); err != nil {
				return err
			}
		}
		cmd := exec.Command(plugin)
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + netns, "CNI_IFNAME=eth0",
			"CNI_PATH=/nonexistent", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=storm;K8S_POD_NAME=" + pod + ";K8S_POD_UID=uid-" + pod}
		cmd.Stdin = bytes.NewReader(conf)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ADD %s: %v: %q", id, err, out)
		}
		return nil
	}
	done := make(chan struct{})
	var readerWG sync.WaitGroup
	readerWG.Go(func() {
		path := store.FilePath(dataDir, "storm")
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			t0 := time.Now()
			st, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: time.Minute})
			if err != nil {
				continue // not made yet
			}
			s.waits = append(s.waits, time.Since(t0))
			st.Close()
		}
	})
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for p := range *flagStormPods {
		wg.Go(func() {
			for i := range *flagStormRetries {
				if err := add(fmt.Sprintf("pod%02d", p), i); err != nil {
					mu.Lock()
					s.failed++
					if s.firstErr == nil {
						s.firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(done)
	readerWG.Wait()
	s.addsPerSec = float64(*flagStormPods**flagStormRetries) / elapsed.Seconds()
	// Healed: each pod holds its last sandbox's address only.
	st, err := store.Open(store.FilePath(dataDir, "storm"), store.OpenOptions{ReadOnly: true, LockTimeout: time.Minute})
	if err != nil {
		return s, err
	}
	defer st.Close()
	held := 0
	err = st.View(func(tx *store.Tx) error {
		return tx.ForEach(func(*allocator.Record) error { held++; return nil })
	})
	if err == nil && s.failed == 0 && held != *flagStormPods {
		err = fmt.Errorf("%s: %d records after the storm, want one per pod (%d): the ADDs did not heal", plugin, held, *flagStormPods)
	}
	return s, err
}

// busyNode adds n idle threads to this process (tasks in /proc, as a busy
// node's runtimes, kubelet and pods have) until stop is called.
func busyNode(n int) (stop func()) {
	release := make(chan struct{})
	var started sync.WaitGroup
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread() // one thread each, kept until release
			started.Done()
			<-release
		}()
	}
	started.Wait()
	return func() { close(release) }
}
