// Command failplugin is a CNI test plugin for the hostlease e2e tests. It is
// meant to be chained after a plugin that produces a result, e.g. the
// conflist [bridge(ipam: ...), failplugin], and lets a test make the chain
// fail on demand by creating or removing files.
//
// Configuration keys (all optional, all absolute paths):
//
//	"failAddFile":  while this file exists, ADD fails (CNI error 999)
//	"failDelFile":  while this file exists, DEL fails (CNI error 999)
//	"delayAddFile": if this file exists when ADD starts, ADD first sleeps for
//	                the Go duration written in it (e.g. "20s")
//	"holdAddFile":  while this file exists, ADD waits (checking every 20ms)
//	                before anything else, for at most holdLimit (then it fails)
//	"logFile":      every invocation appends one JSON line
//	                {"time","verb","containerID","ifname","netns","args","runtimeConfig","error"}
//	                (args: CNI_ARGS, e.g. K8S_POD_UID=... from a CRI runtime;
//	                runtimeConfig: the config's runtimeConfig as JSON, "" when
//	                absent: what the caller injected for the capabilities the
//	                config declares); a GC's line also has "validAttachments",
//	                the runtime's cni.dev/valid-attachments as it sent them (JSON)
//
// Guarantees:
//   - ADD passes prevResult through unchanged (converted to the config's
//     cniVersion); with no prevResult it returns an empty result;
//   - a failing ADD/DEL returns a CNI error whose message names the verb and
//     the file that caused it, and the file's content when it is not empty;
//   - the hold and then the delay are applied before the failAddFile check, so a test can hold an
//     ADD in flight and decide its outcome while it waits; an unparsable delay
//     file makes ADD fail with a message naming the file;
//   - DEL, CHECK, GC and STATUS succeed unless a file above says otherwise;
//     DEL never needs prevResult or any state;
//   - it touches no network namespace and no interface.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// holdLimit bounds how long ADD waits for holdAddFile to go away: a hang
// guard for a test that forgets it (containerd's own timeouts are longer).
const holdLimit = 3 * time.Minute

// config is the failplugin's network configuration.
type config struct {
	types.PluginConf
	FailAddFile  string `json:"failAddFile,omitempty"`
	FailDelFile  string `json:"failDelFile,omitempty"`
	DelayAddFile string `json:"delayAddFile,omitempty"`
	HoldAddFile  string `json:"holdAddFile,omitempty"`
	LogFile      string `json:"logFile,omitempty"`
	// ValidAttachments is what a GC carries, logged as sent.
	ValidAttachments json.RawMessage `json:"cni.dev/valid-attachments,omitempty"`
	// RuntimeConfig is only logged.
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
}

func parseConfig(stdin []byte) (*config, error) {
	conf := &config{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failplugin: cannot decode network config", err.Error())
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failplugin: cannot parse prevResult", err.Error())
	}
	return conf, nil
}

// triggered reports whether path is set and exists, and the trimmed content
// of the file (for the error message).
func triggered(path string) (bool, string) {
	if path == "" {
		return false, ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, ""
		}
		// It exists but is unreadable (e.g. a directory): still a trigger.
		if _, serr := os.Stat(path); serr == nil {
			return true, ""
		}
		return false, ""
	}
	return true, strings.TrimSpace(string(b))
}

func failure(verb, key, path, content string) error {
	msg := fmt.Sprintf("failplugin: %s failing on purpose: %s %q exists", verb, key, path)
	return types.NewError(types.ErrInternal, msg, content)
}

func logCall(conf *config, verb string, args *skel.CmdArgs, callErr error) {
	if conf == nil || conf.LogFile == "" {
		return
	}
	rec := map[string]string{
		"time":        time.Now().UTC().Format(time.RFC3339Nano),
		"verb":        verb,
		"containerID": args.ContainerID,
		"ifname":      args.IfName,
		"netns":       args.Netns,
		"args":        args.Args,
	}
	if len(conf.ValidAttachments) > 0 {
		rec["validAttachments"] = string(conf.ValidAttachments)
	}
	if len(conf.RuntimeConfig) > 0 {
		rec["runtimeConfig"] = string(conf.RuntimeConfig)
	}
	if callErr != nil {
		rec["error"] = callErr.Error()
	}
	line, _ := json.Marshal(rec)
	f, err := os.OpenFile(conf.LogFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "failplugin: cannot open logFile %q: %v\n", conf.LogFile, err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

func cmdAdd(args *skel.CmdArgs) (err error) {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	defer func() { logCall(conf, "ADD", args, err) }()

	if conf.HoldAddFile != "" {
		deadline := time.Now().Add(holdLimit)
		for on, _ := triggered(conf.HoldAddFile); on; on, _ = triggered(conf.HoldAddFile) {
			if time.Now().After(deadline) {
				return types.NewError(types.ErrTryAgainLater,
					fmt.Sprintf("failplugin: holdAddFile %q still exists after %v", conf.HoldAddFile, holdLimit), "")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if on, content := triggered(conf.DelayAddFile); on {
		d, perr := time.ParseDuration(content)
		if perr != nil || d < 0 {
			return types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("failplugin: delayAddFile %q must hold a non-negative Go duration like 20s, has %q", conf.DelayAddFile, content), "")
		}
		time.Sleep(d)
	}
	if on, content := triggered(conf.FailAddFile); on {
		return failure("ADD", "failAddFile", conf.FailAddFile, content)
	}

	if conf.PrevResult == nil {
		return types.PrintResult(&current.Result{CNIVersion: current.ImplementedSpecVersion}, conf.CNIVersion)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) (err error) {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	defer func() { logCall(conf, "DEL", args, err) }()
	if on, content := triggered(conf.FailDelFile); on {
		return failure("DEL", "failDelFile", conf.FailDelFile, content)
	}
	return nil
}

// noop builds a verb that only parses the config and logs the call.
func noop(verb string) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		conf, err := parseConfig(args.StdinData)
		if err != nil {
			return err
		}
		logCall(conf, verb, args, nil)
		return nil
	}
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  noop("CHECK"),
		GC:     noop("GC"),
		Status: noop("STATUS"),
	}, version.All, "failplugin: hostlease e2e test plugin that fails ADD/DEL on demand")
}
