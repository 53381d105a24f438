// Command skeldurablefloor is the skel floor (../skelfloor) that also makes
// each call durable the way the durable floor does (../floorcommit): the
// least a crash-safe IPAM plugin built on the CNI libraries (skel, types)
// can cost. What hostlease costs above it is its config, store and policy.
package main

import (
	"encoding/json"
	"net"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/hostlease/hostlease/test/bench/floorcommit"
)

// netConf is the part of the config the floor reads.
type netConf struct {
	types.NetConf
	IPAM struct {
		DataDir string `json:"dataDir"`
	} `json:"ipam"`
}

func commit(args *skel.CmdArgs, verb string) (*netConf, error) {
	var conf netConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return nil, err
	}
	if err := floorcommit.Commit(conf.IPAM.DataDir, verb, args.ContainerID); err != nil {
		return nil, types.NewError(types.ErrIOFailure, err.Error(), "")
	}
	return &conf, nil
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			conf, err := commit(args, "ADD")
			if err != nil {
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
		Del: func(args *skel.CmdArgs) error {
			_, err := commit(args, "DEL")
			return err
		},
		Check:  func(*skel.CmdArgs) error { return nil },
		GC:     func(*skel.CmdArgs) error { return nil },
		Status: func(*skel.CmdArgs) error { return nil },
	}, version.All, "skel durable floor (benchmark exec floor)")
}
