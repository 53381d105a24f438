package k8s

// Helpers of the upgrade-and-restart scenario: a second image, pods that
// keep starting and stopping, a watcher of the installed plugin binary, and
// leaked records of networks of their own for a long sweep.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// UpgradeVersion is the build version of the binaries in UpgradeImage.
const (
	UpgradeVersion = "e2e-upgrade"
	UpgradeImage   = "localhost/hostlease/hostlease:" + UpgradeVersion
)

var (
	upgradeMu     sync.Mutex
	upgradePlugin string // set once UpgradeImage is built and imported
)

// upgradeImage builds the project's binaries again with another build
// version (the same sources as bin/, so a different file) and imports them
// as UpgradeImage, once per run of the suite (the node keeps its images).
// It returns the new plugin's path.
func upgradeImage(c *Cluster) (string, error) {
	upgradeMu.Lock()
	defer upgradeMu.Unlock()
	if upgradePlugin != "" {
		return upgradePlugin, nil
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(Root, "upgrade")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ldflags := "-s -w -X main.buildVersion=" + UpgradeVersion + " -X " + harness.ModulePath + "/pkg/daemon.Version=" + UpgradeVersion
	for out, pkg := range map[string]string{"hostlease": "./cmd/ipam", "hostlease-gc": "./cmd/ipam-gc"} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(dir, out), pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v: %s", pkg, err, b)
		}
	}
	plugin := filepath.Join(dir, "hostlease")
	if err := importImage(c, UpgradeImage, plugin, filepath.Join(dir, "hostlease-gc")); err != nil {
		return "", err
	}
	upgradePlugin = plugin
	return plugin, nil
}

// binaryID is a plugin binary's content hash and about line.
func binaryID(t testing.TB, path string) (sum, about string) {
	t.Helper()
	sum, err := fileSHA256(path)
	if err == nil {
		about, err = aboutLine(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sum, about
}

// aboutLine is the first line a plugin binary prints when run without
// CNI_COMMAND ("hostlease <version> (...)").
func aboutLine(path string) (string, error) {
	cmd := exec.Command(path)
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v: %s", path, err, stderr.String())
	}
	line, _, _ := strings.Cut(stderr.String(), "\n")
	return line, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readerSHA256(f)
}

func readerSHA256(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// binWatcher looks at the installed plugin as a runtime would, over and over
// while install-cni replaces it: every look must find a complete,
// executable copy of one of the known binaries (by content hash), an inode
// must never change content (the replacement is a rename, not a rewrite),
// and executing it must work and print one of the known about lines.
type binWatcher struct {
	path  string
	known map[string]string // content hash -> name ("old", "new")
	about []string          // accepted about lines

	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	looks      int
	execs      int
	inodes     map[uint64]string // inode -> content hash
	sequence   []string          // names of the contents seen, consecutive duplicates removed
	violations []string
}

func watchBinary(path string, known map[string]string, about []string) *binWatcher {
	w := &binWatcher{path: path, known: known, about: about, stop: make(chan struct{}), done: make(chan struct{}),
		inodes: map[uint64]string{}}
	go w.run()
	return w
}

func (w *binWatcher) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) < 20 {
		w.violations = append(w.violations, time.Now().UTC().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

func (w *binWatcher) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.look()
		w.exec()
		time.Sleep(5 * time.Millisecond) // sampling rate, leaves the CPUs to the node
	}
}

// look opens the installed file and checks its mode and content.
func (w *binWatcher) look() {
	f, err := os.Open(w.path)
	if err != nil {
		w.violate("open %s: %v", w.path, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		w.violate("stat: %v", err)
		return
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 != 0o111 {
		w.violate("inode %d has mode %v, want an executable regular file", ino, st.Mode())
	}
	sum, err := readerSHA256(f)
	if err != nil {
		w.violate("read inode %d: %v", ino, err)
		return
	}
	name, ok := w.known[sum]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.looks++
	if prev, seen := w.inodes[ino]; seen && prev != sum {
		if len(w.violations) < 20 {
			w.violations = append(w.violations, fmt.Sprintf("inode %d changed content (%.12s -> %.12s): the binary was rewritten in place", ino, prev, sum))
		}
	}
	w.inodes[ino] = sum
	if !ok {
		if len(w.violations) < 20 {
			w.violations = append(w.violations, fmt.Sprintf("inode %d holds %d bytes that are none of the known binaries (partially written?)", ino, st.Size()))
		}
		return
	}
	if n := len(w.sequence); n == 0 || w.sequence[n-1] != name {
		w.sequence = append(w.sequence, name)
	}
}

// exec runs the installed file as a runtime does (no CNI_COMMAND: it prints
// its about line and exits 0).
func (w *binWatcher) exec() {
	cmd := exec.Command(w.path)
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	w.mu.Lock()
	w.execs++
	w.mu.Unlock()
	if err != nil {
		w.violate("exec %s: %v: %.200s", w.path, err, stderr.String())
		return
	}
	line, _, _ := strings.Cut(stderr.String(), "\n")
	for _, a := range w.about {
		if line == a {
			return
		}
	}
	w.violate("exec %s printed %q, want one of %q", w.path, line, w.about)
}

// current is the name of the content the last look found.
func (w *binWatcher) current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.sequence) == 0 {
		return ""
	}
	return w.sequence[len(w.sequence)-1]
}

// Stop ends the watcher and returns what it saw.
func (w *binWatcher) Stop() (looks, execs int, sequence, violations []string) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.looks, w.execs, append([]string(nil), w.sequence...), append([]string(nil), w.violations...)
}

// churn keeps a Deployment's pods starting and stopping (kubelet runs ADDs
// and DELs all the time) by scaling it between two sizes, each time waiting
// until the pods have converged, until Stop.
type churn struct {
	c      *Cluster
	ns     string
	name   string
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	cycles int
	uids   map[string]bool // every pod seen Running
	errs   []string
}

func startChurn(c *Cluster, ns, name string, sizes [2]int) *churn {
	ch := &churn{c: c, ns: ns, name: name, stop: make(chan struct{}), done: make(chan struct{}), uids: map[string]bool{}}
	go func() {
		defer close(ch.done)
		for i := 0; ; i++ {
			n := sizes[i%2]
			if _, err := c.Kubectl("-n", ns, "scale", "deployment", name, fmt.Sprintf("--replicas=%d", n)); err != nil {
				ch.fail("scale: %v", err)
			}
			deadline := time.Now().Add(90 * time.Second)
			for {
				select {
				case <-ch.stop:
					return
				default:
				}
				running, all := ch.observe()
				if running == n && all == n {
					break
				}
				if time.Now().After(deadline) {
					ch.fail("cycle %d: %d of %d pods running (%d listed) after 90s", i, running, n, all)
					break
				}
				time.Sleep(300 * time.Millisecond)
			}
			ch.mu.Lock()
			ch.cycles++
			ch.mu.Unlock()
		}
	}()
	return ch
}

func (ch *churn) fail(format string, args ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.errs) < 10 {
		ch.errs = append(ch.errs, fmt.Sprintf(format, args...))
	}
}

// observe counts the Running, not terminating pods and all pods listed.
func (ch *churn) observe() (running, all int) {
	pods, err := ch.c.pods(ch.ns, "")
	if err != nil {
		return -1, -1
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, p := range pods {
		all++
		if runningPod(&p) {
			running++
			ch.uids[string(p.UID)] = true
		}
	}
	return running, all
}

// counts reports the cycles finished and the pods seen Running so far.
func (ch *churn) counts() (cycles, pods int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.cycles, len(ch.uids)
}

// Stop ends the churn (the Deployment keeps whatever size it had) and
// returns the errors it met.
func (ch *churn) Stop() []string {
	select {
	case <-ch.stop:
	default:
		close(ch.stop)
	}
	<-ch.done
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return append([]string(nil), ch.errs...)
}

// logSince returns what a log file gained after offset (and its new size).
func logSince(path string, offset int64) (string, int64) {
	f, err := os.Open(path)
	if err != nil {
		return "", offset
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "", offset
	}
	b, _ := io.ReadAll(f)
	return string(b), offset + int64(len(b))
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logfmtValue returns key's value in a log/slog text line ("" if absent).
func logfmtValue(line, key string) string {
	m := regexp.MustCompile(`(?:^| )` + regexp.QuoteMeta(key) + `=("(?:[^"\\]|\\.)*"|\S*)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"`)
}

// ghostLeak is a record an ADD wrote for a sandbox that never existed, as a
// leak of containerd #12130 looks: pending, its sandbox unknown to CRI, its
// netns path under the runtime's netns dir.
type ghostLeak struct {
	Network, IP, ContainerID, Netns string
}

// makeGhostLeaks runs the installed plugin's ADD n times on network (a
// store of its own in the node's data dir), each with a netns file of its
// own under NetnsDir that exists (so the records carry no proof of death
// until the files go).
func makeGhostLeaks(t testing.TB, network, subnet string, n int) []ghostLeak {
	t.Helper()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":%q}]],"dataDir":%q}}`,
		network, subnet, CNIDataDir)
	out := make([]ghostLeak, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id := randomHex(32)
			netns := filepath.Join(NetnsDir, "hlk8s-ghost-"+id[:12])
			if err := os.WriteFile(netns, nil, 0o644); err != nil {
				errs <- err
				return
			}
			cmd := exec.Command(filepath.Join(CNIBinDir, "hostlease"))
			cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + netns, "CNI_IFNAME=eth0",
				"CNI_PATH=" + CNIBinDir, fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=e2e-ghosts;K8S_POD_NAME=ghost-%s-%d;K8S_POD_UID=%s", network, i, randomHex(16))}
			cmd.Stdin = strings.NewReader(conf)
			res, err := cmd.Output()
			if err != nil {
				errs <- fmt.Errorf("ADD on %s: %v: %s", network, err, res)
				return
			}
			ip := regexp.MustCompile(`"address":\s*"([0-9.]+)/`).FindSubmatch(res)
			if ip == nil {
				errs <- fmt.Errorf("ADD on %s: no address in %s", network, res)
				return
			}
			out[i] = ghostLeak{Network: network, IP: string(ip[1]), ContainerID: id, Netns: netns}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// followLog streams a container's log (kubectl logs -f) line by line until
// ctx ends.
func followLog(ctx context.Context, c *Cluster, ns, pod, container string) (<-chan string, error) {
	cmd := exec.CommandContext(ctx, c.Bins.Kubectl, "--kubeconfig="+c.Kubeconfig, "-n", ns, "logs", "-f", pod, "-c", container)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
			}
		}
		_ = cmd.Wait()
	}()
	return lines, nil
}

// rollout checks a DaemonSet update from the installed image (bin/'s
// binaries) to another one and back while pods churn in ns, whatever
// performs it (kubectl set image / rollout undo, helm upgrade / rollback):
// install-cni replaces the plugin atomically (the watcher only ever finds a
// complete, executable copy of the old or the new binary, an inode never
// changes content, the replaced file still reads the old binary behind an
// open descriptor); containerd and kubelet never fail to exec a plugin, no
// ADD or DEL fails, every Running pod holds its committed record, the
// records are exactly the Running pods', and the audit log shows only the
// DELs' releases.
type rollout struct {
	c         *Cluster
	ns        string
	installed string
	w         *binWatcher
	sums      map[string]string // "old"/"new" -> content hash
	// oldVersion is the build version of the installed daemon and plugin.
	oldVersion string

	start                     time.Time
	containerdOff, kubeletOff int64
}

// watchRollout starts watching the installed plugin; newPlugin is the other
// image's plugin, start and the log offsets are when the churn began.
func watchRollout(t *testing.T, c *Cluster, ns, newPlugin string, start time.Time, containerdOff, kubeletOff int64) *rollout {
	t.Helper()
	oldSum, oldAbout := binaryID(t, mustProjectBin(t, "hostlease"))
	newSum, newAbout := binaryID(t, newPlugin)
	if oldSum == newSum || oldAbout == newAbout {
		t.Fatalf("the upgrade image's plugin is the same binary (%s)", newAbout)
	}
	installed := filepath.Join(CNIBinDir, "hostlease")
	return &rollout{c: c, ns: ns, installed: installed,
		w:    watchBinary(installed, map[string]string{oldSum: "old", newSum: "new"}, []string{oldAbout, newAbout}),
		sums: map[string]string{"old": oldSum, "new": newSum}, oldVersion: strings.Fields(oldAbout)[1],
		start: start, containerdOff: containerdOff, kubeletOff: kubeletOff}
}

// swap runs roll (which updates the DaemonSet) and waits until the
// installed plugin is want ("old" or "new"), the daemon runs version, and a
// pod started since then runs (its ADD executed the new file). The
// descriptor of the file replaced must still read the replaced binary:
// install-cni renamed a new file over it.
func (r *rollout) swap(t *testing.T, want, version string, roll func()) {
	t.Helper()
	c := r.c
	held, err := os.Open(r.installed)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldSum, err := readerSHA256(held)
	if err != nil {
		t.Fatal(err)
	}
	oldPod := gcPod(t, c)
	roll()
	kubectl(t, c, "-n", SysNamespace, "rollout", "status", "daemonset/"+DaemonSetName, "--timeout=3m")
	waitUntil(t, time.Minute, "the "+want+" plugin installed", func() (bool, string) {
		sum, err := fileSHA256(r.installed)
		return err == nil && sum == r.sums[want], r.w.current()
	})
	swapped := time.Now()
	waitUntil(t, 2*time.Minute, "the daemon "+version+" running", func() (bool, string) {
		pod, err := c.Kubectl("-n", SysNamespace, "get", "pods", "-l", "app.kubernetes.io/name=hostlease-gc",
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		if err != nil || pod == oldPod || len(strings.Fields(pod)) != 1 {
			return false, pod
		}
		log, _ := c.Kubectl("-n", SysNamespace, "logs", pod, "-c", "hostlease-gc")
		return strings.Contains(log, `msg="hostlease-gc started" version=`+version+" "), firstLines(log, 3)
	})
	waitUntil(t, 2*time.Minute, "a pod started with the "+want+" plugin", func() (bool, string) {
		for _, rec := range records(t) {
			if rec.PodNamespace == r.ns && rec.State == allocator.StateCommitted && rec.Created.After(swapped) {
				return true, ""
			}
		}
		return false, "no record created since " + swapped.Format(time.RFC3339)
	})
	if _, err := held.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	if sum, err := readerSHA256(held); err != nil || sum != heldSum {
		t.Errorf("the replaced plugin file now reads %.12s (%v), was %.12s: install-cni rewrote it in place instead of renaming a new file over it", sum, err, heldSum)
	}
}

// check stops the watcher and the churn (which settles at 3 pods) and
// asserts what the rollout and the rollback must not have broken.
func (r *rollout) check(t *testing.T, ch *churn) {
	t.Helper()
	c, ns := r.c, r.ns
	looks, execs, seq, violations := r.w.Stop()
	t.Logf("installed plugin watched %d times and executed %d times during the upgrade and the rollback: %s", looks, execs, strings.Join(seq, " -> "))
	for _, v := range violations {
		t.Errorf("installed plugin: %s", v)
	}
	if strings.Join(seq, ",") != "old,new,old" {
		t.Errorf("installed plugin went %v, want old -> new -> old", seq)
	}
	if left, _ := filepath.Glob(filepath.Join(CNIBinDir, ".hostlease.tmp.*")); len(left) > 0 {
		t.Errorf("install-cni left temp files: %v", left)
	}

	// Settle: the churn stops at 3 pods; every DEL of a deleted pod ran.
	if errs := ch.Stop(); len(errs) > 0 {
		t.Errorf("churn: %s", strings.Join(errs, "; "))
	}
	cycles, pods := ch.counts()
	t.Logf("churn: %d scale cycles, %d pods ran in %v", cycles, pods, time.Since(r.start).Round(time.Second))
	settleChurn(t, c, ns, 3)
	live := map[string]bool{}
	for _, rec := range records(t) {
		if rec.PodNamespace == ns {
			live[rec.ContainerID] = true
		}
	}
	releases := 0
	for _, ev := range auditLog(t) {
		if ev.Time.Before(r.start) || !strings.HasPrefix(ev.Pod, ns+"/") {
			continue
		}
		if ev.Action != "release" || ev.By != "plugin" {
			t.Errorf("audit: %s of %s (%s) by %s: only the plugin's DEL may release a churning pod's address", ev.Action, ev.IP, ev.Pod, ev.By)
		}
		if live[ev.ContainerID] {
			t.Errorf("audit: %s released %s of a pod that still runs", ev.By, ev.IP)
		}
		releases++
	}
	t.Logf("%d addresses released by DELs during the churn", releases)
	if releases == 0 {
		t.Error("no DEL released an address: the pods did not churn")
	}
	network, runtime := splitBlame(failureEvents(t, c, ns))
	for _, ev := range network {
		t.Errorf("Event of a churning pod blames a network or plugin: %s %s", ev.Reason, ev.Message)
	}
	for _, ev := range runtime {
		t.Logf("runtime's own failure (names no network or plugin; reported, not judged): %s %s", ev.Reason, ev.Message)
	}
	clog, _ := logSince(filepath.Join(LogDir, "containerd.log"), r.containerdOff)
	klog, _ := logSince(filepath.Join(LogDir, "kubelet.log"), r.kubeletOff)
	for name, log := range map[string]string{"containerd": clog, "kubelet": klog} {
		if bad := pluginFailures(log); len(bad) > 0 {
			t.Errorf("%s's log shows %d failed plugin execs or DELs, e.g.:\n%s", name, len(bad), strings.Join(bad[:min(5, len(bad))], "\n"))
		}
	}
}
