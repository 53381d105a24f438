package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// TestCNIToolGC runs the reference cnitool (of the CNI library version go.mod
// requires) as a user would, on a conflist [bridge(ipam), hostlease (commit
// marker)] in a private network namespace, against host-local on the same
// steps. cnitool v1.3.1's `gc` DELs every attachment its cache holds for the
// network, then sends GC with no cni.dev/valid-attachments. It guarantees, for
// hostlease as for host-local:
//   - `cnitool add` and `cnitool gc` exit 0 (a GC without the list is not an
//     error: before, every hostlease conflist failed it with error 7);
//   - the attachment cnitool added is released by its DEL;
//   - an address reserved outside cnitool (an ADD it never cached) stays held:
//     a GC without the list releases nothing, and hostlease says so on stderr.
func TestCNIToolGC(t *testing.T) {
	requireRoot(t)
	toolDir := t.TempDir()
	if err := testbin.Install(toolDir, "github.com/containernetworking/cni", testbin.CNITool); err != nil {
		t.Fatal(err)
	}
	cnitool := filepath.Join(toolDir, "cnitool")
	host := newNetns(t, "host")
	pod := newNetns(t, "pod")

	for _, ipamType := range []string{"hostlease", "host-local"} {
		t.Run(ipamType, func(t *testing.T) {
			dataDir, confDir := t.TempDir(), t.TempDir()
			network := "hlit-tool-" + randHex(3)
			// cnitool keeps its cache in libcni's default dir, named after
			// the network; whatever a failed step leaves there goes too.
			t.Cleanup(func() {
				m, _ := filepath.Glob("/var/lib/cni/results/" + network + "-*")
				for _, f := range m {
					os.Remove(f)
				}
			})
			plugins := []map[string]any{bridgePlugin("hlbr"+randHex(3), dataDir, "10.84.0.0/24", nil)}
			plugins[0]["ipam"].(map[string]any)["type"] = ipamType
			if ipamType == "hostlease" {
				plugins = append(plugins, map[string]any{"type": "hostlease", "dataDir": dataDir})
			}
			b, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network, "plugins": plugins})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(confDir, "10-"+network+".conflist"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			tool := func(verb string) (string, error) {
				cmd := exec.Command("ip", "netns", "exec", host.name, cnitool, verb, network, pod.path)
				cmd.Env = []string{"CNI_PATH=" + binDir, "NETCONFPATH=" + confDir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			// held lists the addresses the ipam plugin holds, by container.
			held := func() map[string]string {
				out := map[string]string{}
				if ipamType == "hostlease" {
					for id, recs := range byOwnerAll(t, store.FilePath(dataDir, network)) {
						out[id] = recs
					}
					return out
				}
				files, _ := os.ReadDir(filepath.Join(dataDir, network))
				for _, f := range files {
					if strings.HasPrefix(f.Name(), "last_reserved_ip") || strings.HasPrefix(f.Name(), "lock") {
						continue
					}
					id, _ := os.ReadFile(filepath.Join(dataDir, network, f.Name()))
					owner, _, _ := strings.Cut(string(id), "\r\n")
					out[owner] = f.Name()
				}
				return out
			}

			if out, err := tool("add"); err != nil {
				t.Fatalf("cnitool add: %v\n%s", err, out)
			}
			before := held()
			if len(before) != 1 {
				t.Fatalf("after cnitool add the %s store holds %v, want one attachment", ipamType, before)
			}
			// An attachment cnitool never cached: a direct ADD of the ipam
			// plugin, as bridge makes it.
			direct := "direct-" + randHex(8)
			conf := pluginBytesWithName(t, mustJSON(t, plugins[0]), network)
			cmd := exec.Command(filepath.Join(binDir, ipamType))
			cmd.Env = call{Command: "ADD", ContainerID: direct, IfName: "eth0", Netns: pod.path}.env()
			cmd.Stdin = strings.NewReader(string(conf))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("direct %s ADD: %v\n%s", ipamType, err, out)
			}
			directIP := held()[direct]
			if directIP == "" {
				t.Fatalf("the direct ADD reserved nothing: %v", held())
			}

			out, err := tool("gc")
			if err != nil {
				t.Errorf("cnitool gc: %v\n%s", err, out)
			}
			after := held()
			if got := after[direct]; got != directIP {
				t.Errorf("cnitool gc (no cni.dev/valid-attachments) released %s's %s: held now %v", direct, directIP, after)
			}
			if len(after) != 1 {
				t.Errorf("cnitool gc left %v; want only %s (cnitool's own attachment is DELeted from its cache)", after, direct)
			}
			if ipamType == "hostlease" && !strings.Contains(out, "cni.dev/valid-attachments") {
				t.Errorf("cnitool gc output %q: want hostlease's warning naming cni.dev/valid-attachments", out)
			}
			t.Logf("cnitool gc with %s: %v, output %q; held before %v, after %v", ipamType, err, out, before, after)
		})
	}
}

// byOwnerAll returns each container's address(es) in a store, as text.
func byOwnerAll(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := os.Stat(path); err != nil {
		return out
	}
	for _, r := range readStore(t, path).Records {
		out[r.ContainerID] += r.IP.String()
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(fmt.Errorf("marshal %v: %w", v, err))
	}
	return b
}
