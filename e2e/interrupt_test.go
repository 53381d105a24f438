package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/e2e/harness"
)

// interruptChildEnv names the file the child of TestEnvInterruptTearsDown
// writes its env's dir and socket to, once its sandbox runs.
const interruptChildEnv = "HOSTLEASE_E2E_INTERRUPT_CHILD"

// TestEnvInterruptTearsDown: a test binary stopped with SIGTERM (make or CI
// cancelling a run) runs no t.Cleanup; the harness still tears its envs
// down before exiting: no shim of its containerd is left (a shim daemonizes
// away from containerd and outlives it), and its dir and bridge are gone.
func TestEnvInterruptTearsDown(t *testing.T) {
	if out := os.Getenv(interruptChildEnv); out != "" {
		interruptChild(t, out)
		return
	}
	fullSuiteOnly(t)
	if os.Geteuid() != 0 {
		t.Skip("e2e: skipped: needs root (runs containerd)")
	}
	ready := filepath.Join(t.TempDir(), "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEnvInterruptTearsDown$", "-test.v")
	cmd.Env = append(os.Environ(), interruptChildEnv+"="+ready)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
			fields = strings.Fields(string(b))
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the child never ran its sandbox:\n%s", out.String())
		}
	}
	dir, socket, bridge := fields[0], fields[1], fields[2]
	shims := harness.ShimPIDs(socket)
	if len(shims) == 0 {
		t.Fatalf("no shim of %s runs while the child's sandbox does:\n%s", socket, out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("child after SIGTERM: %v; want exit status 143\n%s", err, out.String())
	}
	if left := harness.ShimPIDs(socket); len(left) > 0 {
		t.Errorf("shims %v of the interrupted child's containerd are still running (before: %v)\n%s", left, shims, out.String())
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the interrupted child's env dir %s is still there (%v)", dir, err)
	}
	if exec.Command("ip", "link", "show", "dev", bridge).Run() == nil {
		t.Errorf("the interrupted child's bridge %s is still there", bridge)
	}
	if t.Failed() {
		t.Logf("child's output:\n%s", out.String())
	}
}

// interruptChild runs a sandbox, says where, and waits to be stopped.
func interruptChild(t *testing.T, ready string) {
	env := harness.Setup(t)
	c := newChain(t, env, "10.99.9.0/24")
	if _, err := env.RunPodSandbox(context.Background(), harness.Pod{Name: "interrupted", Namespace: "e2e"}); err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, env.LogTail(40))
	}
	if err := os.WriteFile(ready, []byte(env.Dir+" "+env.Socket+" "+c.Bridge+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Minute) // the parent sends SIGTERM long before
	t.Error("the parent never stopped this child")
}
