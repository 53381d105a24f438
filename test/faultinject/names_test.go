package faultinject

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// confNamed is netConf under another network name.
func confNamed(dataDir, name string) []byte {
	var m map[string]any
	_ = json.Unmarshal(netConf(dataDir), &m)
	m["name"] = name
	b, _ := json.Marshal(m)
	return b
}

// TestLongNetworkNames: a network name too long for "<name>.db" to be a file
// name gets the hashed store name the contract promises (docs/contracts.md),
// and every verb, the CLI and the daemon find the same file: ADD hands out
// distinct addresses, CHECK and STATUS pass, DEL exits 0 and releases, and
// `hostlease-gc status/list/audit` name the network in full.
func TestLongNetworkNames(t *testing.T) {
	for _, n := range []int{252, 253, 255, 256, 300, 1000} {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			name := "n" + strings.Repeat("x", n-2) + "9"
			dir, netnsDir := t.TempDir(), t.TempDir()
			conf := confNamed(dir, name)
			call := func(verb, id string) outcome {
				ns := filepath.Join(netnsDir, id)
				if err := os.WriteFile(ns, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return runPlugin(invocation{Command: verb, ContainerID: id, Netns: ns, Conf: conf})
			}
			got := map[string]bool{}
			ipOf := map[string]string{}
			for _, id := range []string{"long-a", "long-b"} {
				out := call("ADD", id)
				if !out.OK() {
					t.Fatalf("ADD %s on a network named with %d bytes: %v", id, n, out)
				}
				ip, err := resultIP(out.Stdout)
				if err != nil || got[ip.String()] {
					t.Fatalf("ADD %s: %v %v (earlier: %v)", id, ip, err, got)
				}
				got[ip.String()] = true
				ipOf[id] = ip.String()
			}
			for _, verb := range []string{"CHECK", "STATUS"} {
				if out := call(verb, "long-a"); !out.OK() {
					t.Errorf("%s: %v", verb, out)
				}
			}
			files, _ := os.ReadDir(dir)
			var stores []string
			for _, f := range files {
				if strings.HasSuffix(f.Name(), ".db") {
					stores = append(stores, f.Name())
				}
			}
			if len(stores) != 1 || len(stores[0]) > 255 {
				t.Fatalf("want one store file with a name of at most 255 bytes, got %v", stores)
			}
			if n+3 <= 255 && stores[0] != name+".db" {
				t.Errorf("a name that fits keeps it: got %s", stores[0])
			}
			status := runCLI(t, "status", "--data-dir", dir)
			if status.Code != 0 || !strings.Contains(status.Stdout, name) {
				t.Errorf("status does not show the network in full:\n%s", status)
			}
			list := runCLI(t, "list", "--network", name, "--data-dir", dir)
			if list.Code != 0 {
				t.Errorf("list --network <the name>:\n%s", list)
			}
			for ip := range got {
				if !strings.Contains(list.Stdout, ip) {
					t.Errorf("list does not show %s:\n%s", ip, list)
				}
			}
			if out := call("DEL", "long-a"); !out.OK() {
				t.Errorf("DEL: %v", out)
			}
			if out := call("DEL", "long-never-added"); !out.OK() {
				t.Errorf("DEL of an unknown sandbox: %v", out)
			}
			list = runCLI(t, "list", "--network", name, "--data-dir", dir)
			if strings.Contains(list.Stdout, ipOf["long-a"]+" ") || !strings.Contains(list.Stdout, ipOf["long-b"]+" ") {
				t.Errorf("after DEL of long-a: want %s (long-b) alone, not %s (long-a):\n%s", ipOf["long-b"], ipOf["long-a"], list)
			}
			audit := runCLI(t, "audit", "--network", name, "--data-dir", dir)
			if audit.Code != 0 || !strings.Contains(audit.Stdout, "release") {
				t.Errorf("audit shows no release:\n%s", audit)
			}
		})
	}
}
