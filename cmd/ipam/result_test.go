package main

import (
	"bytes"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// cniPrint is what types.PrintResult writes for r at version.
func cniPrint(t *testing.T, r *current.Result, version string) []byte {
	t.Helper()
	conv, err := r.GetAsVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	switch c := conv.(type) {
	case *current.Result:
		err = c.PrintTo(&buf)
	default:
		t.Fatalf("result converted to %T", conv)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func cidr(s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	if v4 := ip.To4(); v4 != nil {
		n.IP = v4
	}
	return *n
}

// TestPrintResultMatchesCNI: where printResult writes an ADD result itself,
// the bytes are exactly types.PrintResult's; where it cannot, it defers.
func TestPrintResultMatchesCNI(t *testing.T) {
	one := 1
	results := map[string]*current.Result{
		"v4 with gateway and route": {
			IPs:    []*current.IPConfig{{Address: cidr("10.40.0.2/16"), Gateway: net.ParseIP("10.40.0.1").To4()}},
			Routes: []*types.Route{{Dst: cidr("0.0.0.0/0")}},
		},
		"dual stack, no gateway, routes with gw": {
			IPs: []*current.IPConfig{{Address: cidr("10.0.0.9/24")}, {Address: cidr("fd00::9/64"), Gateway: net.ParseIP("fd00::1")}},
			Routes: []*types.Route{{Dst: cidr("0.0.0.0/0"), GW: net.ParseIP("10.0.0.1")}, {Dst: cidr("::/0")},
				{Dst: cidr("192.168.0.0/16"), GW: net.ParseIP("10.0.0.254").To4()}},
		},
		"no routes": {IPs: []*current.IPConfig{{Address: cidr("10.0.0.9/24")}}},
		"empty":     {},
		"dns from resolvConf": {
			IPs: []*current.IPConfig{{Address: cidr("10.0.0.9/24")}},
			DNS: types.DNS{Nameservers: []string{"10.96.0.10", "fd00::a"}, Domain: "cluster.local",
				Search: []string{"ns.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5", "a<b>&c\"\\\u2028é\x01"}},
		},
		"dns domain only":  {DNS: types.DNS{Domain: "x"}},
		"dns options only": {DNS: types.DNS{Options: []string{"rotate"}}},
		// These it leaves to types.PrintResult.
		"route mtu":      {Routes: []*types.Route{{Dst: cidr("0.0.0.0/0"), MTU: 1400}}},
		"interface":      {IPs: []*current.IPConfig{{Address: cidr("10.0.0.9/24"), Interface: &one}}},
		"with interface": {Interfaces: []*current.Interface{{Name: "eth0"}}},
	}
	deferred := map[string]bool{"route mtu": true, "interface": true, "with interface": true}
	for name, r := range results {
		for _, version := range []string{"1.0.0", "1.1.0"} {
			got, ok := encodeResult(r, version)
			if ok == deferred[name] {
				t.Errorf("%s at %s: encoded itself = %v, want %v", name, version, ok, !deferred[name])
			}
			if !ok {
				continue
			}
			if want := cniPrint(t, r, version); !bytes.Equal(got, want) {
				t.Errorf("%s at %s:\n got %s\nwant %s", name, version, got, want)
			}
		}
	}
	for _, version := range []string{"0.3.1", "0.4.0", "0.2.0", "", "2.0.0"} {
		if _, ok := encodeResult(results["v4 with gateway and route"], version); ok {
			t.Errorf("encoded a result at version %q itself; only 1.0.0 and 1.1.0 are its own", version)
		}
	}
}
