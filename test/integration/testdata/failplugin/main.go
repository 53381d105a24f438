// Command failplugin is the integration tests' fallback chained plugin, used
// when the tree has no e2e/failplugin. It understands the same keys:
// ADD fails (CNI error 999) while the file named by "failAddFile" exists, DEL
// fails while "failDelFile" exists; otherwise ADD passes prevResult through
// and every other verb succeeds. It touches no namespace or interface.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

type config struct {
	types.PluginConf
	FailAddFile string `json:"failAddFile,omitempty"`
	FailDelFile string `json:"failDelFile,omitempty"`
}

func load(stdin []byte) (*config, error) {
	c := &config{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failplugin: config", err.Error())
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failplugin: prevResult", err.Error())
	}
	return c, nil
}

func exists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := load(args.StdinData)
	if err != nil {
		return err
	}
	if exists(c.FailAddFile) {
		return types.NewError(types.ErrInternal, fmt.Sprintf("failplugin: ADD failing on purpose: failAddFile %q exists", c.FailAddFile), "")
	}
	if c.PrevResult == nil {
		return types.PrintResult(&current.Result{CNIVersion: current.ImplementedSpecVersion}, c.CNIVersion)
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	c, err := load(args.StdinData)
	if err != nil {
		return err
	}
	if exists(c.FailDelFile) {
		return types.NewError(types.ErrInternal, fmt.Sprintf("failplugin: DEL failing on purpose: failDelFile %q exists", c.FailDelFile), "")
	}
	return nil
}

func noop(args *skel.CmdArgs) error {
	_, err := load(args.StdinData)
	return err
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: noop, GC: noop, Status: noop},
		version.All, "failplugin (hostlease integration tests)")
}
