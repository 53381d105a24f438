package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/e2e/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeFacts is what a containerd version does on each failure path that
// hostlease cares about, as measured by the TestEnv* tests on that version
// (see the table in README.md). The tests assert exactly these facts, so a
// new version that behaves differently fails loudly instead of being
// averaged away.
type runtimeFacts struct {
	// FailedSandboxListed (1.x): after RunPodSandbox failed because the chain's
	// ADD and its cleanup DEL both failed (containerd #12130), CRI still
	// lists the sandbox (NOTREADY, its name reserved) until it is stopped
	// and removed. false: the runtime swallows the DEL error (setup produced
	// no CNI result) and forgets the sandbox at once.
	FailedSandboxListed bool
	// StopTearsDownWithoutResult: StopPodSandbox runs CNI DEL for a sandbox
	// that has no CNI result (its ADD never completed, e.g. containerd was
	// killed mid-ADD) and ignores a DEL error then (containerd PR #12923).
	// false: stop skips DEL for such a sandbox, so its address leaks.
	StopTearsDownWithoutResult bool
	// CallsStatus: CRI Status runs CNI STATUS on the loaded network (once
	// per call, never on its own) and a STATUS error sets NetworkReady=false.
	CallsStatus bool
}

// factsFor returns the measured facts of containerd v.
func factsFor(v harness.Version) runtimeFacts {
	return runtimeFacts{
		FailedSandboxListed:        v.Major == 1,
		StopTearsDownWithoutResult: hasPR12923(v),
		CallsStatus:                v.Major >= 2,
	}
}

// hasPR12923 reports whether v carries containerd PR #12923 (StopPodSandbox
// tries the teardown even without a CNI result). Measured on 1.7.35, 2.1.9,
// 2.2.9 and 2.4.2 (and its absence on 2.1.4); the thresholds come from the
// "ignoring because the sandbox network setup result is nil" branch in
// sandbox_stop.go of the releases the module proxy serves: 1.7.31+ (not
// 1.7.30), 2.0.13+ (the oldest 2.0 served), 2.1.7+ (not 2.1.5; 2.1.6 and
// 2.1.7 are not served, the PR names 2.1.7), 2.2.2+ (not 2.2.1), 2.3.0+.
func hasPR12923(v harness.Version) bool {
	switch {
	case v.Major == 1:
		return v.Minor == 7 && v.Patch >= 31
	case v.Major == 2 && v.Minor == 0:
		return v.Patch >= 13
	case v.Major == 2 && v.Minor == 1:
		return v.Patch >= 7
	case v.Major == 2 && v.Minor == 2:
		return v.Patch >= 2
	default:
		return v.AtLeast(2, 3, 0)
	}
}

// facts is factsFor the env's containerd.
func facts(env *harness.Env) runtimeFacts { return factsFor(env.Version) }

// fullSuiteOnly skips a test that is not one of the core scenarios when this
// process runs only those (a containerd version other than the default; see
// harness.CoreOnly).
func fullSuiteOnly(t *testing.T) {
	t.Helper()
	if harness.CoreOnly() {
		v, _ := harness.SelectedVersion()
		t.Skipf("not a core scenario: runs on the default containerd %s only (this run: %s, core scenarios)", harness.DefaultVersion(), v)
	}
}

// kubeletCleanup does what kubelet does after a failed RunPodSandbox when the
// runtime still lists the failed sandbox: stop it (SyncPod kills a sandbox
// that is not ready before creating the next one) and remove it (the
// sandbox GC). It returns the sandboxes of pod p (any attempt) that were not
// READY, as they were listed before the cleanup.
func kubeletCleanup(t *testing.T, env *harness.Env, p harness.Pod) []*runtimeapi.PodSandbox {
	t.Helper()
	list, err := env.ListPodSandbox(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var failed []*runtimeapi.PodSandbox
	for _, sb := range list {
		md := sb.GetMetadata()
		if md.GetName() != p.Name || (p.Namespace != "" && md.GetNamespace() != p.Namespace) || sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		failed = append(failed, sb)
		if err := env.StopPodSandbox(context.Background(), sb.Id); err != nil {
			t.Fatalf("kubelet cleanup: StopPodSandbox %.12s (%v): %v\n%s", sb.Id, sb.State, err, env.LogTail(30))
		}
		if err := env.RemovePodSandbox(context.Background(), sb.Id); err != nil {
			t.Fatalf("kubelet cleanup: RemovePodSandbox %.12s: %v\n%s", sb.Id, err, env.LogTail(30))
		}
	}
	return failed
}

// describeSandboxes prints sandboxes for the test log.
func describeSandboxes(sbs []*runtimeapi.PodSandbox) string {
	if len(sbs) == 0 {
		return "none"
	}
	var parts []string
	for _, sb := range sbs {
		parts = append(parts, fmt.Sprintf("%.12s %s attempt %d %v", sb.Id, sb.GetMetadata().GetName(), sb.GetMetadata().GetAttempt(), sb.State))
	}
	return strings.Join(parts, ", ")
}
