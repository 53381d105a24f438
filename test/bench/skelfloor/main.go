// Command skelfloor is the skel floor of the plugin benchmarks: a CNI plugin
// that does nothing but what every Go plugin built on the CNI libraries does
// (skel reads the environment and stdin, the config's network and ipam
// sections are decoded with encoding/json into the CNI types, the result is
// printed through types.PrintResult) and returns a fixed result. Its cost
// above the static floor (../staticfloor) is what importing and running the
// CNI libraries costs at every exec.
//
// Installed as "skel-durable-floor" it is the skel-durable floor: it also
// makes each ADD and DEL durable the way the durable floor does
// (../floorcommit), the least a crash-safe IPAM plugin on the CNI libraries
// can cost. What hostlease costs above that is its config, store and policy.
//
// Installed as "skel-bbolt-floor" it commits each call through bbolt instead
// (floorcommit.BoltCommit: one key put or deleted in one transaction): the
// least a plugin on the CNI libraries keeping its state in bbolt can cost.
// Built with -tags onep it runs on one P from early initialisation, as
// hostlease does (onep.go); the benchmark installs that build as
// "skel-bbolt-floor-1p".
package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/hostlease/hostlease/test/bench/floorcommit"
)

// Names under which the binary commits each call: the skel-durable floor
// (two pages written and fdatasync'ed) and the skel-bbolt floor (a bbolt
// transaction).
const (
	durableName = "skel-durable-floor"
	boltName    = "skel-bbolt-floor"
)

// commitMode is how a call is made durable: not at all (the skel floor),
// or as one of the floors named above.
type commitMode int

const (
	noCommit commitMode = iota
	durableCommit
	boltCommit
)

// netConf is the config as an IPAM plugin of host-local's schema must decode
// it: the network's fields, and the whole ipam section with its addresses and
// routes as the CNI types decode them (json.Unmarshal, as a real plugin
// does). The floor uses only dataDir.
type netConf struct {
	types.NetConf
	IPAM struct {
		types.IPAM
		Ranges [][]struct {
			Subnet     types.IPNet `json:"subnet"`
			RangeStart net.IP      `json:"rangeStart"`
			RangeEnd   net.IP      `json:"rangeEnd"`
			Gateway    net.IP      `json:"gateway"`
		} `json:"ranges"`
		Routes     []*types.Route `json:"routes"`
		DataDir    string         `json:"dataDir"`
		ResolvConf string         `json:"resolvConf"`
	} `json:"ipam"`
	RuntimeConfig struct {
		IPs []string `json:"ips"`
	} `json:"runtimeConfig"`
	Args *struct {
		CNI struct {
			IPs []string `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
}

// call decodes the config and, as a durable floor, commits the call.
func call(args *skel.CmdArgs, verb string, mode commitMode) (*netConf, error) {
	var conf netConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return nil, err
	}
	var err error
	switch mode {
	case durableCommit:
		err = floorcommit.Commit(conf.IPAM.DataDir, verb, args.ContainerID)
	case boltCommit:
		err = floorcommit.BoltCommit(conf.IPAM.DataDir, verb, args.ContainerID)
	}
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure, err.Error(), "")
	}
	return &conf, nil
}

func main() {
	mode := noCommit
	switch strings.TrimSuffix(filepath.Base(os.Args[0]), "-1p") {
	case durableName:
		mode = durableCommit
	case boltName:
		mode = boltCommit
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			conf, err := call(args, "ADD", mode)
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
			_, err := call(args, "DEL", mode)
			return err
		},
		Check:  func(*skel.CmdArgs) error { return nil },
		GC:     func(*skel.CmdArgs) error { return nil },
		Status: func(*skel.CmdArgs) error { return nil },
	}, version.All, "skel floor (benchmark exec floor)")
}
