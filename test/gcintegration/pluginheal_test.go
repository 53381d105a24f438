package gcintegration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// addForPod runs IPAM ADD for sandbox id of the pod uid (its netns file
// created first, as the runtime does).
func (n *node) addForPod(id, uid string) {
	n.t.Helper()
	if err := os.WriteFile(n.netns(id), nil, 0o600); err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBin())
	cmd.Env = []string{
		"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + n.netns(id), "CNI_IFNAME=eth0", "CNI_PATH=" + binDir,
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-" + uid + ";K8S_POD_UID=" + uid + ";K8S_POD_INFRA_CONTAINER_ID=" + id,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
	cmd.Stdin = bytes.NewReader(n.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if o := cniexec.Classify(cmd.Run(), stdout.Bytes(), stderr.Bytes(), 0); !o.OK() {
		n.t.Fatalf("ADD %s (pod %s): %s", id, uid, o)
	}
}

// A pod crash-looping while the daemon is down: the plugin releases each
// dead sandbox's address itself (audited). The daemon, started later,
// reports each release once (log, hostlease_plugin_releases_total by
// reason); restarted, it reports none of them again; a release made while
// it runs is reported at its next sweep.
func TestDaemonReportsPluginReleases(t *testing.T) {
	t.Parallel()
	n := newNode(t, 8)
	for i := range 3 {
		if i > 0 {
			if err := os.Remove(n.netns(fmt.Sprintf("loop%d", i-1))); err != nil {
				t.Fatal(err)
			}
		}
		n.addForPod(fmt.Sprintf("loop%d", i), "uid-loop")
	}
	var got []string
	for _, ev := range n.audit() {
		if allocator.IsPluginRelease(ev) {
			got = append(got, ev.Reason+" "+ev.ContainerID+" "+ev.Pod+" "+ev.PodUID)
		}
	}
	want := []string{"pod_sandbox_replaced loop0 default/pod-uid-loop uid-loop", "pod_sandbox_replaced loop1 default/pod-uid-loop uid-loop"}
	if !slices.Equal(got, want) {
		t.Fatalf("hostlease-gc audit: plugin releases %q, want %q", got, want)
	}
	ip := n.records()["loop2"].IP
	n.cri.Ready("loop2", ip)

	reported := func(d *daemon, count float64) {
		t.Helper()
		eventually(t, "plugin releases reported", func() (bool, string) {
			m := d.scrape()
			v, _ := m.get("hostlease_plugin_releases_total", lbl("network", network, "reason", allocator.ReasonPodSandboxReplaced))
			return v == count, fmt.Sprintf("hostlease_plugin_releases_total = %v, want %v", v, count)
		})
	}
	d := n.startDaemon()
	reported(d, 2)
	if logs := d.logs.entries("the plugin released an address of a sandbox whose netns the runtime had torn down"); len(logs) != 2 {
		t.Errorf("%d log lines for the plugin's releases, want 2", len(logs))
	}
	d.stopClean()

	d = n.startDaemon()
	// Three sweeps: the reports of the first daemon are not repeated.
	start := d.scrape().sweeps()
	eventually(t, "three sweeps", func() (bool, string) {
		s := d.scrape().sweeps()
		return s >= start+3, fmt.Sprintf("%v sweeps", s)
	})
	reported(d, 0)
	if logs := d.logs.entries("the plugin released an address of a sandbox whose netns the runtime had torn down"); len(logs) != 0 {
		t.Errorf("the restarted daemon reported %d releases again", len(logs))
	}
	if v, ok := d.scrape().get("hostlease_plugin_releases_total", lbl("network", network, "reason", allocator.ReasonNetnsGoneAtExhaustion)); !ok || v != 0 {
		t.Errorf("hostlease_plugin_releases_total{reason=netns_gone_at_exhaustion} = %v (present %v), want 0 from the start", v, ok)
	}
	// One more retry while the daemon runs.
	if err := os.Remove(n.netns("loop2")); err != nil {
		t.Fatal(err)
	}
	n.addForPod("loop3", "uid-loop")
	n.cri.Ready("loop3", n.records()["loop3"].IP)
	reported(d, 1)
}
