package deploy_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// The DaemonSet: its wiring to the daemon's real flag set, host mounts,
// container security, the CNI install command and the Dockerfile.

// expandVars expands $(VAR) references as the kubelet does for args, from the
// container's env; fieldRef/resourceFieldRef values get test stand-ins.
func expandVars(t *testing.T, c corev1.Container, s string) string {
	t.Helper()
	vals := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vals[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			vals[e.Name] = "node-a"
		case e.ValueFrom.ResourceFieldRef != nil:
			vals[e.Name] = "268435456"
		}
	}
	out := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vals[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
	if strings.Contains(out, "$(") {
		t.Errorf("unresolved variable in %q", out)
	}
	return out
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// hostMount returns the hostPath volume mounted at mountPath in c.
func hostMount(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, mountPath string) (corev1.VolumeMount, *corev1.HostPathVolumeSource) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(mountPath) {
			continue
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				if v.HostPath == nil {
					t.Fatalf("volume %s at %s is not a hostPath", v.Name, mountPath)
				}
				return m, v.HostPath
			}
		}
		t.Fatalf("mount %s refers to missing volume %s", mountPath, m.Name)
	}
	t.Fatalf("container %s has no mount at %s", c.Name, mountPath)
	return corev1.VolumeMount{}, nil
}

func parseRunArgs(t *testing.T, c corev1.Container) *daemon.Options {
	t.Helper()
	if len(c.Command) != 1 || c.Command[0] != "/hostlease-gc" {
		t.Fatalf("command %q, want [/hostlease-gc]", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("args %q do not start with the run subcommand", c.Args)
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, expandVars(t, c, a))
	}
	t.Setenv("NODE_NAME", "") // the flag must be set by the args, not inherited
	// Parsed as hostlease-gc parses them (pflag: --name or --name=value;
	// a single-dash long flag is refused).
	gfs := flag.NewFlagSet("hostlease-gc run", flag.ContinueOnError)
	o := daemon.RegisterRunFlags(gfs)
	fs := pflag.NewFlagSet("hostlease-gc run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.AddGoFlagSet(gfs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("args %q: %v", args, err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("stray arguments %q", fs.Args())
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("args %q: Validate: %v", args, err)
	}
	for _, name := range []string{"node-name", "data-dir", "cri-endpoint", "metrics-addr"} {
		if !fs.Changed(name) {
			t.Errorf("--%s is not passed explicitly", name)
		}
	}
	return o
}

func TestDaemonSet(t *testing.T) {
	for dir, wantSocket := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
			pod := ds.Spec.Template.Spec
			gcC := container(t, pod.Containers, "hostlease-gc")
			o := parseRunArgs(t, gcC)

			if o.NodeName != "node-a" {
				t.Errorf("--node-name resolves to %q, want the downward API's spec.nodeName", o.NodeName)
			}
			if o.DataDir != daemon.DefaultDataDir || o.NetnsDir != daemon.DefaultNetnsDir || o.MetricsAddr != daemon.DefaultMetricsAddr {
				t.Errorf("data dir %q, netns dir %q, metrics addr %q differ from the daemon's defaults",
					o.DataDir, o.NetnsDir, o.MetricsAddr)
			}
			if wantEndpoint := "unix://" + wantSocket; o.CRIEndpoint != wantEndpoint {
				t.Errorf("--cri-endpoint=%s, want %s", o.CRIEndpoint, wantEndpoint)
			}
			if wantSocket == containerdSocket && o.CRIEndpoint != daemon.DefaultCRIEndpoint {
				t.Errorf("containerd endpoint %s differs from the daemon's default %s", o.CRIEndpoint, daemon.DefaultCRIEndpoint)
			}

			// Host paths: the same path inside as on the host.
			m, hp := hostMount(t, ds, gcC, o.DataDir)
			if hp.Path != o.DataDir || m.ReadOnly {
				t.Errorf("data dir: host %s mounted at %s readOnly=%v; want %s read-write", hp.Path, m.MountPath, m.ReadOnly, o.DataDir)
			}
			m, hp = hostMount(t, ds, gcC, o.NetnsDir)
			if hp.Path != o.NetnsDir || !m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
				t.Errorf("netns dir: host %s at %s readOnly=%v propagation=%v; want %s, read-only, HostToContainer",
					hp.Path, m.MountPath, m.ReadOnly, m.MountPropagation, o.NetnsDir)
			}
			sock := strings.TrimPrefix(o.CRIEndpoint, "unix://")
			m, hp = hostMount(t, ds, gcC, filepath.Dir(sock))
			if hp.Path != filepath.Dir(wantSocket) {
				t.Errorf("CRI socket dir: host %s mounted at %s, want host %s", hp.Path, m.MountPath, filepath.Dir(wantSocket))
			}
			for _, mnt := range gcC.VolumeMounts {
				if mnt.MountPath != o.DataDir && mnt.MountPath != o.NetnsDir && mnt.MountPath != filepath.Dir(sock) && mnt.MountPath != "/tmp" {
					t.Errorf("unexpected mount %s in hostlease-gc", mnt.MountPath)
				}
			}

			// Probes and port.
			_, port, err := net.SplitHostPort(o.MetricsAddr)
			if err != nil {
				t.Fatal(err)
			}
			var metricsPort *corev1.ContainerPort
			for i, p := range gcC.Ports {
				if p.Name == "metrics" {
					metricsPort = &gcC.Ports[i]
				}
			}
			if metricsPort == nil || fmt.Sprint(metricsPort.ContainerPort) != port || port != "9734" {
				t.Errorf("container port metrics = %v, want %s (from --metrics-addr) = 9734", metricsPort, port)
			}
			// The probes ask the daemon's own unix socket (exec), never the
			// metrics port, where hostNetwork pods share the kubelet's address.
			// Its directory is one the daemon creates 0700 in the /tmp
			// emptyDir (world-writable, which the daemon refuses as the socket's
			// directory).
			if o.ProbeSocket == "" || filepath.Dir(filepath.Dir(o.ProbeSocket)) != "/tmp" {
				t.Errorf("--probe-socket = %q, want a socket in a directory of its own in the pod's /tmp emptyDir", o.ProbeSocket)
			}
			for probe, what := range map[*corev1.Probe]string{gcC.LivenessProbe: "healthz", gcC.ReadinessProbe: "readyz"} {
				want := []string{gcC.Command[0], "probe", what, "--socket=" + o.ProbeSocket}
				if probe == nil || probe.Exec == nil || len(probe.Exec.Command) < len(want) || !slices.Equal(probe.Exec.Command[:len(want)], want) {
					t.Errorf("probe for %s: %+v; want exec %v", what, probe, want)
					continue
				}
				if probe.HTTPGet != nil || probe.TimeoutSeconds < 5 {
					t.Errorf("probe for %s: %+v; want exec only, timeoutSeconds >= 5 (above the probe's --timeout)", what, probe)
				}
			}
			if n := gcC.Env; len(n) == 0 || func() bool {
				for _, e := range n {
					if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
						return false
					}
				}
				return true
			}() {
				t.Errorf("NODE_NAME does not come from the downward API spec.nodeName")
			}

			// Memory: GOMEMLIMIT (bytes or a KiB/MiB/GiB suffix, as the Go
			// runtime reads it) leaves headroom below the container's limit.
			limit := gcC.Resources.Limits.Memory()
			goLimit := int64(-1)
			for _, e := range gcC.Env {
				if e.Name != "GOMEMLIMIT" {
					continue
				}
				if e.ValueFrom != nil {
					t.Errorf("GOMEMLIMIT comes from %+v: it must be a value below limits.memory, not the limit itself", e.ValueFrom)
					continue
				}
				goLimit = goMemLimit(t, e.Value)
			}
			switch {
			case limit == nil || limit.IsZero():
				t.Errorf("hostlease-gc has no memory limit")
			case goLimit < 0:
				t.Errorf("hostlease-gc has no GOMEMLIMIT")
			case goLimit < limit.Value()/2 || goLimit > limit.Value()*9/10:
				t.Errorf("GOMEMLIMIT %d bytes is not between 50%% and 90%% of limits.memory %s", goLimit, limit)
			}

			// Scheduling.
			if pod.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", pod.PriorityClassName)
			}
			tolerateAll := false
			for _, tol := range pod.Tolerations {
				tolerateAll = tolerateAll || (tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "")
			}
			if !tolerateAll {
				t.Errorf("tolerations %+v do not tolerate every taint", pod.Tolerations)
			}
			if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork=%v dnsPolicy=%s: the daemon must not depend on the pool it repairs", pod.HostNetwork, pod.DNSPolicy)
			}
			if pod.HostPID || pod.HostIPC {
				t.Errorf("hostPID/hostIPC are not needed")
			}
			sel := ds.Spec.Selector.MatchLabels
			for k, v := range sel {
				if ds.Spec.Template.Labels[k] != v {
					t.Errorf("selector %v does not match template labels %v", sel, ds.Spec.Template.Labels)
				}
			}

			// Security and resources for every container.
			all := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
			for _, c := range all {
				checkContainerSecurity(t, c)
				for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
					if rl.Cpu().IsZero() || rl.Memory().IsZero() {
						t.Errorf("%s: requests and limits need cpu and memory: %+v", c.Name, c.Resources)
					}
				}
				if c.Image != gcC.Image {
					t.Errorf("%s: image %s differs from %s", c.Name, c.Image, gcC.Image)
				}
			}
			if dir == "overlays/example" && !strings.HasSuffix(gcC.Image, ":v0.1.0") {
				t.Errorf("example overlay image %s, want tag v0.1.0", gcC.Image)
			}

			// install-cni.
			ic := container(t, pod.InitContainers, "install-cni")
			m, hp = hostMount(t, ds, ic, "/host/opt/cni/bin")
			if hp.Path != "/opt/cni/bin" || m.ReadOnly {
				t.Errorf("install-cni: host %s at %s readOnly=%v", hp.Path, m.MountPath, m.ReadOnly)
			}
			if sa := pod.ServiceAccountName; sa != "hostlease-gc" {
				t.Errorf("serviceAccountName %q", sa)
			}
			_ = find[*corev1.ServiceAccount](t, objs, "ServiceAccount", pod.ServiceAccountName)
		})
	}
}

func checkContainerSecurity(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", c.Name)
		return
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem must be true", c.Name)
	}
	if sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("%s: capabilities must drop ALL and add none: %+v", c.Name, sc.Capabilities)
	}
	// Root is needed (root-owned CRI socket, stores, /opt/cni/bin) and must be
	// explicit, since the image's default user is nonroot.
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: runAsUser must be 0 explicitly", c.Name)
	}
}

// The install-cni init container is `hostlease-gc install-cni` with the
// image's plugin and the mounted CNI bin dir, and that exact command line
// really installs atomically: the real binaries run it with the two paths
// mapped into a temporary "image" and "host", over an old binary held open
// (a plugin being exec'd during the upgrade).
func TestInstallCNICommand(t *testing.T) {
	objs := build(t, "base")
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", "hostlease-gc")
	ic := container(t, ds.Spec.Template.Spec.InitContainers, "install-cni")
	wantCmd := []string{"/hostlease-gc", "install-cni"}
	wantArgs := []string{"--from=/hostlease", "--to=/host/opt/cni/bin"}
	if !slices.Equal(ic.Command, wantCmd) || !slices.Equal(ic.Args, wantArgs) {
		t.Fatalf("install-cni command %q args %q: want %q %q", ic.Command, ic.Args, wantCmd, wantArgs)
	}
	hostMount(t, ds, ic, "/host/opt/cni/bin") // --to is the host's CNI bin dir
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "image")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testbin.Build(bin, map[string]string{"hostlease": testbin.Plugin, "hostlease-gc": testbin.GC}); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(tmp, "host-cni-bin")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(host, "hostlease")
	if err := os.WriteFile(old, []byte("#!/bin/false\nold binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	oldFile, err := os.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	defer oldFile.Close()
	oldInfo, _ := oldFile.Stat()

	mapped := strings.NewReplacer("=/hostlease", "="+filepath.Join(bin, "hostlease"), "=/host/opt/cni/bin", "="+host)
	args := []string{ic.Command[1]}
	for _, a := range ic.Args {
		args = append(args, mapped.Replace(a))
	}
	out, err := exec.Command(filepath.Join(bin, "hostlease-gc"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("hostlease-gc %q: %v\n%s", args, err, out)
	}
	want, _ := os.ReadFile(filepath.Join(bin, "hostlease"))
	got, err := os.ReadFile(old)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed %d bytes (%v), want the image's plugin (%d bytes)", len(got), err, len(want))
	}
	st, _ := os.Stat(old)
	if st.Mode().Perm() != 0o755 {
		t.Errorf("installed mode %v, want 0755", st.Mode())
	}
	if os.SameFile(st, oldInfo) {
		t.Errorf("the old file was overwritten in place, not replaced by rename")
	}
	if b, _ := io.ReadAll(oldFile); string(b) != "#!/bin/false\nold binary\n" {
		t.Errorf("the old binary, held open, now reads %d other bytes: it was rewritten", len(b))
	}
	if entries, _ := os.ReadDir(host); len(entries) != 1 {
		t.Errorf("leftovers in the bin dir: %v", entries)
	}
}

// The image the manifests reference is built by the Dockerfile as they expect.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"FROM --platform=$BUILDPLATFORM golang:1.26 AS build",
		"ENV CGO_ENABLED=0",
		"-o /out/hostlease ./cmd/ipam",
		"-o /out/hostlease-gc ./cmd/ipam-gc",
		"-X github.com/hostlease/hostlease/pkg/daemon.Version=${VERSION}",
		"-X main.buildVersion=${VERSION}",
		"COPY --from=build /out/hostlease /hostlease",
		"COPY --from=build /out/hostlease-gc /hostlease-gc",
		`ENTRYPOINT ["/hostlease-gc"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// Nothing in the image needs a shell (install-cni is hostlease-gc's own
	// command): the final stage is distroless static without busybox, i.e.
	// not a "debug" tag.
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if last := froms[len(froms)-1][1]; last != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage %s, want gcr.io/distroless/static-debian12:nonroot (no shell, no busybox)", last)
	}
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does (a byte count
// with an optional B, KiB, MiB, GiB or TiB suffix).
func goMemLimit(t *testing.T, v string) int64 {
	t.Helper()
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = rest, u.m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("GOMEMLIMIT %q: not a size the Go runtime reads", v)
	}
	return n * mult
}
