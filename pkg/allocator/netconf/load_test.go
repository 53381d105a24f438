package netconf

import (
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/internal/testing/rangetest"
	"github.com/hostlease/hostlease/pkg/allocator"
)

// acceptCases are configs Load must accept; the host-local oracle test
// (hostlocal_test.go) also runs them.
var acceptCases = func() []acceptCase {
	v4 := rangetest.Set(rangetest.Range("10.0.0.0/28", "10.0.0.1", "10.0.0.14", "10.0.0.1"))
	return []acceptCase{{
		name: "ranges with several subnets per range set and explicit bounds",
		conf: `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"hostlease","ranges":[
			[{"subnet":"10.0.0.0/28"},{"subnet":"10.0.1.0/28","rangeStart":"10.0.1.4","rangeEnd":"10.0.1.8","gateway":"10.0.1.9"}],
			[{"subnet":"10.0.2.0/29","gateway":"10.0.2.6"}]]}}`,
		check: func(t *testing.T, c *Config) {
			want := []allocator.StoredRangeSet{
				rangetest.Set(rangetest.Range("10.0.0.0/28", "10.0.0.1", "10.0.0.14", "10.0.0.1"),
					rangetest.Range("10.0.1.0/28", "10.0.1.4", "10.0.1.8", "10.0.1.9")),
				rangetest.Set(rangetest.Range("10.0.2.0/29", "10.0.2.1", "10.0.2.6", "10.0.2.6")),
			}
			eq(t, "RangeSets", c.RangeSets, want)
			eq(t, "Network", c.Network, "net1")
			eq(t, "CNIVersion", c.CNIVersion, "1.0.0")
			eq(t, "Marker", c.Marker, false)
			eq(t, "StoreDir", c.StoreDir, allocator.DefaultStoreDir)
			eq(t, "HostLocalDir", c.HostLocalDir, allocator.DefaultHostLocalDir)
			eq(t, "LockTimeout", c.LockTimeout, DefaultLockTimeout)
			eq(t, "FailStatusOnExhaustion (off by default: a STATUS error evicts the node's pods)", c.FailStatusOnExhaustion, false)
		},
	}, {
		name: "legacy top-level subnet is prepended to ranges",
		conf: `{"cniVersion":"0.4.0","name":"net1","ipam":{"type":"hostlease",
			"subnet":"10.2.0.0/24","rangeStart":"10.2.0.10","rangeEnd":"10.2.0.20","gateway":"10.2.0.254",
			"ranges":[[{"subnet":"fd00::/120"}]]}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "RangeSets", c.RangeSets, []allocator.StoredRangeSet{
				rangetest.Set(rangetest.Range("10.2.0.0/24", "10.2.0.10", "10.2.0.20", "10.2.0.254")),
				rangetest.Set(rangetest.Range("fd00::/120", "fd00::1", "fd00::ff", "fd00::1")),
			})
		},
	}, {
		name: "legacy top-level subnet alone",
		conf: `{"cniVersion":"0.3.1","name":"net1","ipam":{"type":"hostlease","subnet":"10.0.0.0/28"}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "RangeSets", c.RangeSets, []allocator.StoredRangeSet{v4})
		},
	}, {
		name: "routes, dataDir and resolvConf",
		conf: `{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"hostlease","subnet":"10.0.0.0/28",
			"dataDir":"/run/x","resolvConf":"/etc/resolv.conf",
			"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.0.0.3"}]}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "StoreDir", c.StoreDir, "/run/x")
			eq(t, "HostLocalDir", c.HostLocalDir, "/run/x")
			eq(t, "ResolvConf", c.IPAM.ResolvConf, "/etc/resolv.conf")
			if len(c.IPAM.Routes) != 2 || c.IPAM.Routes[0].Dst.String() != "0.0.0.0/0" ||
				c.IPAM.Routes[1].Dst.String() != "192.168.0.0/16" || !c.IPAM.Routes[1].GW.Equal(net.ParseIP("10.0.0.3")) {
				t.Errorf("Routes = %v", c.IPAM.Routes)
			}
		},
	}, {
		name:    "requested IPs from CNI_ARGS, args.cni.ips and runtimeConfig.ips, in that order",
		conf:    `{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/28"}],[{"subnet":"fd00::/120"}]]},"args":{"cni":{"ips":["10.0.0.5/28"]}},"runtimeConfig":{"ips":["fd00::9"]}}`,
		cniArgs: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;IP=10.0.0.7",
		check: func(t *testing.T, c *Config) {
			var got []string
			for _, ip := range c.IPAM.Requested {
				got = append(got, ip.String())
			}
			eq(t, "Requested", got, []string{"10.0.0.7", "10.0.0.5", "fd00::9"})
		},
	}, {
		name: "runtimeConfig.ipRanges are prepended to the configured ranges",
		conf: `{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/28"}]]},
			"runtimeConfig":{"ipRanges":[[{"subnet":"fd00::/124","rangeStart":"fd00::4"}]]}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "RangeSets", c.RangeSets, []allocator.StoredRangeSet{
				rangetest.Set(rangetest.Range("fd00::/124", "fd00::4", "fd00::f", "fd00::1")),
				v4,
			})
		},
	}, {
		name: "dual-stack: IPv6 ranges end at the subnet's last address",
		conf: `{"cniVersion":"1.0.0","name":"dual","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/28"}],[{"subnet":"fd00:1::/64"}]]}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "RangeSets", c.RangeSets, []allocator.StoredRangeSet{
				v4,
				rangetest.Set(rangetest.Range("fd00:1::/64", "fd00:1::1", "fd00:1::ffff:ffff:ffff:ffff", "fd00:1::1")),
			})
		},
	}, {
		name: "lockTimeout and failStatusOnExhaustion",
		conf: `{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"hostlease","subnet":"10.0.0.0/28","lockTimeout":"250ms","failStatusOnExhaustion":true}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "LockTimeout", c.LockTimeout, 250*time.Millisecond)
			eq(t, "FailStatusOnExhaustion", c.FailStatusOnExhaustion, true)
		},
	}, {
		name: "commit marker: no ipam key, top-level dataDir",
		conf: `{"cniVersion":"1.1.0","name":"net1","type":"hostlease","dataDir":"/run/hl","prevResult":{"ips":[{"address":"10.0.0.2/28"}]}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "Marker", c.Marker, true)
			eq(t, "StoreDir", c.StoreDir, "/run/hl")
			if c.IPAM != nil || c.RangeSets != nil {
				t.Errorf("marker config has IPAM %v, RangeSets %v", c.IPAM, c.RangeSets)
			}
		},
	}, {
		name: "commit marker without dataDir uses the default store dir",
		conf: `{"cniVersion":"1.1.0","name":"net1","type":"hostlease"}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "Marker", c.Marker, true)
			eq(t, "StoreDir", c.StoreDir, allocator.DefaultStoreDir)
		},
	}, {
		name: "commit marker with a key in another case (decoded by json.Unmarshal)",
		conf: `{"cniVersion":"1.1.0","Name":"net1","type":"hostlease","dataDir":"/run/hl"}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "Marker", c.Marker, true)
			eq(t, "Network", c.Network, "net1")
			eq(t, "StoreDir", c.StoreDir, "/run/hl")
		},
	}, {
		name: "GC's valid attachments, either spelling",
		conf: `{"cniVersion":"1.1.0","name":"net1","ipam":{"type":"hostlease","subnet":"10.0.0.0/28"},"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "ValidAttachments", c.ValidAttachments, []allocator.Attachment{{ContainerID: "c1", IfName: "eth0"}})
		},
	}, {
		name: "network names may hold '.', '_' and '-' after the first character",
		conf: `{"cniVersion":"1.0.0","name":"k8s-pod_net.v2","ipam":{"subnet":"10.0.0.0/28"}}`,
		check: func(t *testing.T, c *Config) {
			eq(t, "Network", c.Network, "k8s-pod_net.v2")
		},
	}}
}()

type acceptCase struct {
	name    string
	conf    string
	cniArgs string
	check   func(t *testing.T, c *Config)
}

func TestLoadAccepts(t *testing.T) {
	for _, tc := range acceptCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.conf), tc.cniArgs)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tc.check(t, c)
		})
	}
}

type rejectCase struct {
	name    string
	conf    string
	cniArgs string
	code    uint
	// Every string must appear in the message; the first names the field.
	want []string
}

// rejectCases are configs Load must refuse, with the error's code and
// words; the host-local oracle test (hostlocal_test.go) also runs them.
var rejectCases = func() []rejectCase {
	// ipam wraps a range set list in a config with a valid name and version.
	ipam := func(body string) string {
		return `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"hostlease",` + body + `}}`
	}
	ranges := func(sets string) string { return ipam(`"ranges":` + sets) }
	ok := ranges(`[[{"subnet":"10.0.0.0/28"}]]`)
	return []rejectCase{
		{"garbage", `not json at all`, "", types.ErrDecodingFailure, []string{"not valid JSON"}},
		{"truncated JSON", `{"cniVersion":"1.0.0","name":"net1","ipam":{`, "", types.ErrDecodingFailure, []string{"not valid JSON"}},
		{"name wrong type", `{"name":5,"ipam":{}}`, "", types.ErrDecodingFailure, []string{"name:", "string"}},
		{"ipam wrong type", `{"name":"n","ipam":"host-local"}`, "", types.ErrDecodingFailure, []string{"ipam:"}},
		{"ranges wrong type", ranges(`"10.0.0.0/24"`), "", types.ErrDecodingFailure, []string{"ipam.ranges:"}},
		{"subnet wrong type", ranges(`[[{"subnet":24}]]`), "", types.ErrDecodingFailure, []string{"ipam.ranges.subnet:"}},
		{"legacy subnet wrong type", ipam(`"subnet":24`), "", types.ErrDecodingFailure, []string{"ipam.subnet:"}},
		{"rangeStart wrong type", ranges(`[[{"subnet":"10.0.0.0/24","rangeStart":5}]]`), "", types.ErrDecodingFailure, []string{"ipam.ranges.rangeStart:"}},
		{"routes wrong type", ipam(`"subnet":"10.0.0.0/24","routes":"0.0.0.0/0"`), "", types.ErrDecodingFailure, []string{"ipam.routes:"}},
		{"dataDir wrong type", ipam(`"subnet":"10.0.0.0/24","dataDir":1`), "", types.ErrDecodingFailure, []string{"ipam.dataDir:"}},
		{"lockTimeout wrong type", ipam(`"subnet":"10.0.0.0/24","lockTimeout":10`), "", types.ErrDecodingFailure, []string{"ipam.lockTimeout:"}},
		{"failStatusOnExhaustion wrong type", ipam(`"subnet":"10.0.0.0/24","failStatusOnExhaustion":"no"`), "", types.ErrDecodingFailure, []string{"ipam.failStatusOnExhaustion:"}},
		{"args.cni.ips wrong type", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":"10.0.0.5"}}}`, "", types.ErrDecodingFailure, []string{"args.cni.ips:"}},
		{"ipRanges wrong type", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ipRanges":{}}}`, "", types.ErrDecodingFailure, []string{"runtimeConfig.ipRanges:"}},

		{"bad subnet in first range", ranges(`[[{"subnet":"10.0.0.0/33"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[0][0].subnet:", "10.0.0.0/33"}},
		{"bad subnet in second range of a set", ranges(`[[{"subnet":"10.0.0.0/28"},{"subnet":"10.0.1.0"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[0][1].subnet:"}},
		{"bad subnet in second set", ranges(`[[{"subnet":"10.0.0.0/28"}],[{"subnet":"fd00::/129"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[1][0].subnet:"}},
		{"missing subnet value", ranges(`[[{"subnet":""}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[0][0].subnet:"}},
		{"bad legacy subnet", ipam(`"subnet":"10.0.0/24"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.subnet:"}},
		{"bad legacy rangeStart", ipam(`"subnet":"10.0.0.0/24","rangeStart":"10.0.0.x"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.rangeStart:"}},
		{"bad rangeStart", ranges(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[0][0].rangeStart:"}},
		{"bad rangeEnd", ranges(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.0/24"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[0][0].rangeEnd:"}},
		{"bad gateway", ranges(`[[{"subnet":"10.0.0.0/24","gateway":"gw"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges[0][0].gateway:"}},
		{"bad ipRanges subnet", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ipRanges":[[{"subnet":"x"}]]}}`, "", types.ErrInvalidNetworkConfig, []string{"runtimeConfig.ipRanges[0][0].subnet:"}},
		{"bad route dst", ipam(`"subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0"},{"dst":"default"}]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.routes[1].dst:"}},
		{"bad route gw", ipam(`"subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.256"}]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.routes[0].gw:"}},
		{"bad args.cni.ips entry", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":["10.0.0.5","ten"]}}}`, "", types.ErrInvalidNetworkConfig, []string{"args.cni.ips[1]:"}},
		{"bad runtimeConfig.ips entry", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":["10.0.0.5/"]}}`, "", types.ErrInvalidNetworkConfig, []string{"runtimeConfig.ips[0]:"}},
		{"empty args.cni.ips entry", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":["10.0.0.5",""]}}}`, "", types.ErrInvalidNetworkConfig, []string{"args.cni.ips[1]:", "cannot understand ip"}},
		{"empty runtimeConfig.ips entry", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":[""]}}`, "", types.ErrInvalidNetworkConfig, []string{"runtimeConfig.ips[0]:", "cannot understand ip"}},
		// host-local itself panics on these (nil *ip.IP); a crashing DEL is retried forever.
		// hostlease refuses them (errNullIP).
		{"null args.cni.ips entry", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":[null]}}}`, "", types.ErrInvalidNetworkConfig, []string{"args.cni.ips[0]:"}},
		{"null runtimeConfig.ips entry", `{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":["10.0.0.4",null]}}`, "", types.ErrInvalidNetworkConfig, []string{"runtimeConfig.ips[1]:"}},

		{"rangeStart outside subnet", ranges(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.1"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "RangeStart 10.0.1.1 not in network 10.0.0.0/24"}},
		{"rangeStart after rangeEnd", ranges(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.50","rangeEnd":"10.0.0.20"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges: invalid range set 0: rangeStart 10.0.0.50 is after rangeEnd 10.0.0.20"}},
		{"legacy rangeStart after rangeEnd", ipam(`"subnet":"10.0.0.0/24","rangeStart":"10.0.0.50","rangeEnd":"10.0.0.20"`), "", types.ErrInvalidNetworkConfig, []string{"rangeStart 10.0.0.50 is after rangeEnd 10.0.0.20"}},
		{"rangeEnd outside subnet", ranges(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.1.0"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "RangeEnd 10.0.1.0 not in network"}},
		{"overlapping range sets", ranges(`[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/25"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "range set 0 overlaps with 1"}},
		{"overlapping ranges in a set", ranges(`[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.128/25"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "invalid range set 0", "overlap"}},
		{"legacy subnet overlaps ranges", ipam(`"subnet":"10.0.0.0/24","ranges":[[{"subnet":"10.0.0.0/28"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "range set 0 overlaps with 1"}},
		{"mixed families in a set", ranges(`[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "mixed address families"}},
		{"/31", ranges(`[[{"subnet":"10.0.0.0/31"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "10.0.0.0/31 too small"}},
		{"/32", ranges(`[[{"subnet":"10.0.0.7/32"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "10.0.0.7/32 too small"}},
		{"/127", ranges(`[[{"subnet":"fd00::/127"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "too small"}},
		{"host bits set", ranges(`[[{"subnet":"10.0.0.1/24"}]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "host bits set", "10.0.0.0"}},
		{"no ranges", ipam(`"dataDir":"/tmp"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "no IP ranges"}},
		{"empty range set", ranges(`[[]]`), "", types.ErrInvalidNetworkConfig, []string{"ipam.ranges:", "empty range set"}},
		{"two v4 sets before CNI 0.3.0", `{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, "", types.ErrInvalidNetworkConfig, []string{"CNI version 0.2.0"}},

		{"network name escapes the data dir", `{"cniVersion":"1.0.0","name":"../x","ipam":{"subnet":"10.0.0.0/24"}}`, "", types.ErrInvalidNetworkConfig, []string{"name:", `"../x"`}},
		{"network name with a slash", `{"cniVersion":"1.0.0","name":"a/b","ipam":{"subnet":"10.0.0.0/24"}}`, "", types.ErrInvalidNetworkConfig, []string{"name:"}},
		{"network name starting with a dot", `{"cniVersion":"1.0.0","name":".db","ipam":{"subnet":"10.0.0.0/24"}}`, "", types.ErrInvalidNetworkConfig, []string{"name:"}},
		{"empty network name", `{"cniVersion":"1.0.0","ipam":{"subnet":"10.0.0.0/24"}}`, "", types.ErrInvalidNetworkConfig, []string{"name:"}},
		{"marker type with a null ipam", `{"cniVersion":"1.0.0","name":"net1","type":"hostlease","ipam":null}`, "", types.ErrInvalidNetworkConfig, []string{"IPAM config missing 'ipam' key"}},
		{"marker type with a null ipam under a key in another case", `{"cniVersion":"1.0.0","name":"net1","type":"hostlease","IPAM":null}`, "", types.ErrInvalidNetworkConfig, []string{"IPAM config missing 'ipam' key"}},
		{"bad network name in marker mode", `{"cniVersion":"1.0.0","name":"x y","type":"hostlease"}`, "", types.ErrInvalidNetworkConfig, []string{"name:"}},

		{"lockTimeout not a duration", ipam(`"subnet":"10.0.0.0/24","lockTimeout":"ten seconds"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.lockTimeout:"}},
		{"lockTimeout without unit", ipam(`"subnet":"10.0.0.0/24","lockTimeout":"10"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.lockTimeout:"}},
		{"lockTimeout zero", ipam(`"subnet":"10.0.0.0/24","lockTimeout":"0s"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.lockTimeout:"}},
		{"lockTimeout negative", ipam(`"subnet":"10.0.0.0/24","lockTimeout":"-1s"`), "", types.ErrInvalidNetworkConfig, []string{"ipam.lockTimeout:"}},

		{"CNI_ARGS without '='", ok, "K8S_POD_NAME", types.ErrInvalidEnvironmentVariables, []string{"CNI_ARGS:"}},
		{"CNI_ARGS unknown key", ok, "FOO=bar", types.ErrInvalidEnvironmentVariables, []string{"CNI_ARGS:", "FOO"}},
		{"CNI_ARGS bad IP", ok, "IgnoreUnknown=1;IP=10.0.0.300", types.ErrInvalidEnvironmentVariables, []string{"CNI_ARGS:", "10.0.0.300"}},
		{"CNI_ARGS IP garbage", ok, "IP=x", types.ErrInvalidEnvironmentVariables, []string{"CNI_ARGS:", "IP"}},
		{"CNI_ARGS bad IgnoreUnknown", ok, "IgnoreUnknown=maybe", types.ErrInvalidEnvironmentVariables, []string{"CNI_ARGS:"}},
	}
}()

func TestLoadRejects(t *testing.T) {
	for _, tc := range rejectCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.conf), tc.cniArgs)
			if err == nil {
				t.Fatalf("Load accepted it: %+v", c)
			}
			var cerr *types.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error %T %q is not a *types.Error", err, err)
			}
			if cerr.Code != tc.code {
				t.Errorf("code = %d, want %d (msg %q)", cerr.Code, tc.code, cerr.Msg)
			}
			if !strings.HasPrefix(cerr.Msg, tc.want[0]) && !strings.Contains(cerr.Msg, tc.want[0]) {
				t.Errorf("msg %q does not name %q", cerr.Msg, tc.want[0])
			}
			for _, w := range tc.want[1:] {
				if !strings.Contains(cerr.Msg, w) {
					t.Errorf("msg %q lacks %q", cerr.Msg, w)
				}
			}
		})
	}
}

// A field that host-local accepts empty must not be blamed for an error
// elsewhere in the config.
func TestLoadBlamesTheRightField(t *testing.T) {
	conf := `{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24","gateway":""}],[{"subnet":"10.1.0.0/24","rangeStart":"10.2.0.1"}]]}}`
	_, err := Load([]byte(conf), "")
	var cerr *types.Error
	if !errors.As(err, &cerr) || cerr.Code != types.ErrInvalidNetworkConfig {
		t.Fatalf("err = %#v, want code 7", err)
	}
	if strings.Contains(cerr.Msg, "gateway") || !strings.Contains(cerr.Msg, "RangeStart 10.2.0.1") {
		t.Errorf("msg %q blames the wrong field", cerr.Msg)
	}
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

// Keys of the ipam section (and of its ranges) that nothing reads are
// accepted, as host-local accepts them, and listed for the plugin to warn
// about: whichever decoder took the config (the fast reader, or
// json.Unmarshal for a config it leaves, here one with an escaped string).
func TestLoadListsUnknownIPAMKeys(t *testing.T) {
	typos := `"type":"hostlease","rangeStrat":"10.0.0.5","ranges":[[{"subnet":"10.0.0.0/24","gatway":"10.0.0.1"}],[{"subnet":"10.1.0.0/24"},{"subnet":"10.2.0.0/24","rangeEnd":"10.2.0.9","Foo":1}]]`
	want := []string{"ipam.rangeStrat", "ipam.ranges[0][0].gatway", "ipam.ranges[1][1].Foo"}
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"fast reader", `{"cniVersion":"1.0.0","name":"n1","type":"bridge","ipam":{` + typos + `}}`, want},
		{"json.Unmarshal", `{"cniVersion":"1.0.0","name":"n\u0031","type":"bridge","ipam":{` + typos + `}}`, want},
		{"case-folded field names are fields", `{"cniVersion":"1.0.0","name":"n1","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"Subnet":"10.0.0.0/24"}]],"DataDir":"/tmp/x"}}`, nil},
		{"runtime ranges are not the ipam section", `{"cniVersion":"1.0.0","name":"n1","type":"bridge","runtimeConfig":{"ipRanges":[[{"subnet":"10.9.0.0/24","x":1}]]},"ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24"}]]}}`, nil},
		{"clean", `{"cniVersion":"1.0.0","name":"n1","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24"}]]}}`, nil},
	} {
		c, err := Load([]byte(tc.conf), "")
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(c.UnknownKeys, tc.want) {
			t.Errorf("%s: UnknownKeys %q, want %q", tc.name, c.UnknownKeys, tc.want)
		}
	}
}

// TestLoadForRelease: a DEL's config may name no range (a runtime that
// rebuilds each plugin's config from CNI's schema sends one); the rest of the
// config is checked as Load checks it, and a config naming a range loads as
// Load loads it.
func TestLoadForRelease(t *testing.T) {
	t.Run("no range", func(t *testing.T) {
		for _, tc := range []struct{ conf, dir string }{
			{`{"cniVersion":"1.1.0","ipam":{"type":"hostlease"},"name":"n","type":"bridge"}`, allocator.DefaultStoreDir},
			{`{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[],"dataDir":"/run/hl","lockTimeout":"3s"}}`, "/run/hl"},
		} {
			c, err := LoadForRelease([]byte(tc.conf), "IgnoreUnknown=1;K8S_POD_UID=u")
			if err != nil {
				t.Fatalf("LoadForRelease(%s): %v", tc.conf, err)
			}
			if !c.NoRange || c.RangeSets != nil || c.IPAM != nil || c.Network != "n" || c.StoreDir != tc.dir || c.Marker {
				t.Errorf("LoadForRelease(%s) = %+v; want NoRange, network n, store dir %s, no ranges", tc.conf, c, tc.dir)
			}
			if _, err := Load([]byte(tc.conf), ""); err == nil {
				t.Errorf("Load(%s) accepted a config naming no range", tc.conf)
			}
		}
	})
	t.Run("still refused", func(t *testing.T) {
		for _, tc := range []struct{ conf, args, field string }{
			{`{"cniVersion":"1.1.0","ipam":{"type":"hostlease","lockTimeout":"x"},"name":"n","type":"bridge"}`, "", "ipam.lockTimeout"},
			{`{"cniVersion":"1.1.0","ipam":{"type":"hostlease"},"name":"../n","type":"bridge"}`, "", "name"},
			{`{"cniVersion":"1.1.0","ipam":{"type":"hostlease"},"name":"n","type":"bridge"}`, "IP", "CNI_ARGS"},
			{`{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":null}`, "", "'ipam'"},
			{`{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.1/31"}]]}}`, "", "ipam.ranges"},
		} {
			_, err := LoadForRelease([]byte(tc.conf), tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("LoadForRelease(%s, %q) = %v; want an error naming %s", tc.conf, tc.args, err, tc.field)
			}
		}
	})
	t.Run("a range", func(t *testing.T) {
		conf := []byte(`{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.0.0.0/24"}]]}}`)
		a, errA := Load(conf, "")
		b, errB := LoadForRelease(conf, "")
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("Load = %+v, %v; LoadForRelease = %+v, %v; want the same", a, errA, b, errB)
		}
	})
}
