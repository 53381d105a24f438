package deploy_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"sigs.k8s.io/yaml"

	"github.com/hostlease/hostlease/pkg/daemon"
)

// The example CNI conflists.

func checkConflist(t *testing.T, where string, raw []byte) {
	t.Helper()
	cl, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if len(cl.Plugins) < 2 {
		t.Errorf("%s: %d plugins, want a chain ending with the commit marker", where, len(cl.Plugins))
		return
	}
	var ipamIdx []int
	for i, p := range cl.Plugins {
		if p.Network.IPAM.Type == "hostlease" {
			ipamIdx = append(ipamIdx, i)
		}
	}
	if len(ipamIdx) != 1 || ipamIdx[0] == len(cl.Plugins)-1 {
		t.Errorf("%s: want exactly one plugin (not the last) with ipam type hostlease, got indexes %v", where, ipamIdx)
		return
	}
	var ipam struct {
		IPAM struct {
			Type    string `json:"type"`
			DataDir string `json:"dataDir"`
			Ranges  [][]struct {
				Subnet     string `json:"subnet"`
				RangeStart string `json:"rangeStart"`
				RangeEnd   string `json:"rangeEnd"`
				Gateway    string `json:"gateway"`
			} `json:"ranges"`
			LockTimeout            *string `json:"lockTimeout"`
			FailStatusOnExhaustion *bool   `json:"failStatusOnExhaustion"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(cl.Plugins[ipamIdx[0]].Bytes, &ipam); err != nil {
		t.Errorf("%s: ipam section: %v", where, err)
		return
	}
	if len(ipam.IPAM.Ranges) == 0 {
		t.Errorf("%s: no ranges", where)
	}
	for i, rs := range ipam.IPAM.Ranges {
		for _, r := range rs {
			_, subnet, err := net.ParseCIDR(r.Subnet)
			if err != nil {
				t.Errorf("%s: range set %d: %v", where, i, err)
				continue
			}
			for _, ip := range []string{r.RangeStart, r.RangeEnd, r.Gateway} {
				if ip != "" && !subnet.Contains(net.ParseIP(ip)) {
					t.Errorf("%s: range set %d: %s outside %s", where, i, ip, r.Subnet)
				}
			}
		}
	}
	last := cl.Plugins[len(cl.Plugins)-1]
	var marker map[string]any
	if err := json.Unmarshal(last.Bytes, &marker); err != nil {
		t.Fatal(err)
	}
	if marker["type"] != "hostlease" {
		t.Errorf("%s: last plugin is %v, want the hostlease commit marker", where, marker["type"])
	}
	if _, ok := marker["ipam"]; ok {
		t.Errorf("%s: the commit marker must have no ipam key", where)
	}
	// The marker must find the same stores as the ipam section
	// (docs/contracts.md): both default to daemon.DefaultDataDir.
	orDefault := func(d string) string {
		if d == "" {
			return daemon.DefaultDataDir
		}
		return filepath.Clean(d)
	}
	if dd, _ := marker["dataDir"].(string); orDefault(dd) != orDefault(ipam.IPAM.DataDir) {
		t.Errorf("%s: commit marker dataDir %q != ipam dataDir %q", where, dd, ipam.IPAM.DataDir)
	}
}

func TestExampleConflists(t *testing.T) {
	files, err := filepath.Glob("examples/*.conflist")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	dual := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkConflist(t, f, b)
		if strings.Contains(f, "dualstack") {
			dual = true
			var c struct {
				Plugins []struct {
					IPAM struct {
						Ranges [][]struct{ Subnet string } `json:"ranges"`
					} `json:"ipam"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			rs := c.Plugins[0].IPAM.Ranges
			if len(rs) != 2 || strings.Contains(rs[0][0].Subnet, ":") || !strings.Contains(rs[1][0].Subnet, ":") {
				t.Errorf("%s: want a v4 and a v6 range set, got %+v", f, rs)
			}
		}
	}
	if !dual {
		t.Error("no dual-stack example")
	}

	b, err := os.ReadFile("examples/multus-networkattachmentdefinition.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var nad struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &nad); err != nil {
		t.Fatal(err)
	}
	if nad.APIVersion != "k8s.cni.cncf.io/v1" || nad.Kind != "NetworkAttachmentDefinition" {
		t.Errorf("multus example is %s %s", nad.APIVersion, nad.Kind)
	}
	checkConflist(t, "multus NetworkAttachmentDefinition spec.config", []byte(nad.Spec.Config))
}
