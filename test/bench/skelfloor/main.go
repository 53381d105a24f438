// Command skelfloor is the skel floor of the plugin benchmarks: a CNI plugin
// that does nothing but what every Go plugin built on the CNI libraries does
// (skel reads the environment and stdin, the config is decoded, the result is
// printed through types.PrintResult) and returns a fixed result. Its cost
// above the static floor (../staticfloor) is what importing and running the
// CNI libraries costs at every exec.
package main

import (
	"encoding/json"
	"net"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			var conf types.NetConf
			if err := json.Unmarshal(args.StdinData, &conf); err != nil {
				return err
			}
			return types.PrintResult(&current.Result{
				CNIVersion: current.ImplementedSpecVersion,
				IPs: []*current.IPConfig{{
					Address: net.IPNet{IP: net.IPv4(10, 0, 0, 2), Mask: net.CIDRMask(16, 32)},
					Gateway: net.IPv4(10, 0, 0, 1),
				}},
			}, conf.CNIVersion)
		},
		Del:    func(*skel.CmdArgs) error { return nil },
		Check:  func(*skel.CmdArgs) error { return nil },
		GC:     func(*skel.CmdArgs) error { return nil },
		Status: func(*skel.CmdArgs) error { return nil },
	}, version.All, "skel floor (benchmark exec floor)")
}
