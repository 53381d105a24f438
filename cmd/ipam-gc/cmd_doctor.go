package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/internal/trustfs"
	"github.com/hostlease/hostlease/pkg/allocator/netconf"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// doctorFlags are the daemon's flags doctor checks the node against: the
// same names and defaults as run's, so that the DaemonSet's arguments can be
// passed as they are.
var doctorFlags = map[string]bool{"data-dir": true, "netns-dir": true, "cri-endpoint": true, "proc-dir": true}

// A finding is one thing wrong, where (a file, a directory, an endpoint)
// and how to fix it.
type finding struct {
	where, problem, fix string
}

func (f finding) String() string { return f.where + ": " + f.problem + "; fix: " + f.fix }

// doctorSetup is what doctor checks: the CNI conf and bin dirs, the
// plugin's type (its file name in the bin dir) and the daemon's options.
type doctorSetup struct {
	confDir, binDir, pluginType string
	daemon                      *daemon.Options
}

func doctorCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "doctor",
		Short: "check the node's CNI configs, plugin and daemon settings; one line per problem with its fix",
		Long: "Check, before or after installing, what makes hostlease lose track of addresses: every network config of the\n" +
			"CNI conf dir that uses the plugin (the config loads; no unknown ipam keys; gateways in their subnets; an absolute\n" +
			"dataDir, the same in the ipam section, the commit marker and the daemon's --data-dir; the commit marker present\n" +
			"and last), the plugin installed in the CNI bin dir at this version, the data dir trusted and every store in it\n" +
			"readable and writable, CRI answering, and the daemon's --netns-dir verified. Pass the daemon's own flags.\n" +
			"Prints one line per problem (where: what; fix: how) and exits 1 if there is any.",
		Example: `  hostlease-gc doctor
  hostlease-gc doctor --cni-conf-dir /etc/cni/net.d --cni-bin-dir /opt/cni/bin --data-dir /var/lib/cni/hostlease
  kubectl -n kube-system exec ds/hostlease-gc -- hostlease-gc doctor --cni-conf-dir /host/etc/cni/net.d --cni-bin-dir /host/opt/cni/bin`,
		Args: noArgs,
	}
	s := doctorSetup{daemon: daemonFlags(c, doctorFlags)}
	c.Flags().StringVar(&s.confDir, "cni-conf-dir", "/etc/cni/net.d", "the runtime's CNI network config dir")
	c.Flags().StringVar(&s.binDir, "cni-bin-dir", "/opt/cni/bin", "the runtime's CNI plugin dir")
	c.Flags().StringVar(&s.pluginType, "plugin-type", installNameDefault, "the plugin's \"type\" in the configs (its file name in --cni-bin-dir)")
	c.RunE = func(*cobra.Command, []string) error {
		if err := s.daemon.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if err := checkCRIEndpoint(s.daemon.CRIEndpoint); err != nil {
			return err
		}
		found, checked := s.run(stderr)
		for _, f := range found {
			printf(stdout, "%s", f)
		}
		if len(found) > 0 {
			return fmt.Errorf("%d problem(s) found", len(found))
		}
		printf(stdout, "no problems found (%s)", strings.Join(checked, ", "))
		return nil
	}
	return c
}

// run runs every check and returns the findings, and what was checked.
func (s doctorSetup) run(stderr io.Writer) (found []finding, checked []string) {
	nets, f := s.checkConfDir()
	found = append(found, f...)
	checked = append(checked, fmt.Sprintf("%d network config(s) using %s in %s", nets, s.pluginType, s.confDir))
	found = append(found, s.checkPluginVersion()...)
	stores, f := checkDataDir(s.daemon.DataDir)
	found = append(found, f...)
	checked = append(checked, fmt.Sprintf("data dir %s with %d store(s)", s.daemon.DataDir, stores))
	found = append(found, s.checkSweep(stderr)...)
	checked = append(checked, "CRI at "+s.daemon.CRIEndpoint, "--netns-dir "+s.daemon.NetnsDir)
	return found, checked
}

// checkConfDir reads the conf dir as a runtime does (*.conf, *.conflist,
// *.json) and checks each network that uses the plugin. It returns how many
// do.
func (s doctorSetup) checkConfDir() (int, []finding) {
	if fi, err := os.Stat(s.confDir); err != nil || !fi.IsDir() {
		return 0, []finding{{s.confDir, "no such CNI conf dir", "pass the runtime's with --cni-conf-dir"}}
	}
	var files []string
	for _, ext := range []string{"*.conf", "*.conflist", "*.json"} {
		m, _ := filepath.Glob(filepath.Join(s.confDir, ext))
		files = append(files, m...)
	}
	slices.Sort(files)
	var found []finding
	nets := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			found = append(found, finding{file, err.Error(), "make it readable"})
			continue
		}
		used, f := checkNetworkConfig(file, raw, s.pluginType, s.daemon.DataDir)
		if used {
			nets++
		}
		found = append(found, f...)
	}
	if nets == 0 {
		found = append(found, finding{s.confDir, fmt.Sprintf("no network config uses ipam type %q", s.pluginType),
			fmt.Sprintf("set \"ipam\": {\"type\": %q, ...} in the network's conflist (or pass --plugin-type)", s.pluginType)})
	}
	return nets, found
}

// pluginConf is one plugin entry of a network config, as the runtime passes
// it to the plugin: with the list's name and cniVersion.
type pluginConf map[string]json.RawMessage

// checkNetworkConfig checks one config file: whether it uses the plugin
// (ipam type pluginType), and the findings if it does. Pure: raw is the
// file's content.
func checkNetworkConfig(file string, raw []byte, pluginType, dataDir string) (bool, []finding) {
	var list struct {
		Name       string       `json:"name"`
		CNIVersion string       `json:"cniVersion"`
		Plugins    []pluginConf `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return false, []finding{{file, "not a CNI network config: " + err.Error(), "correct the JSON or move the file out of the conf dir"}}
	}
	single := list.Plugins == nil
	if single {
		var p pluginConf
		_ = json.Unmarshal(raw, &p)
		list.Plugins = []pluginConf{p}
	}
	ipamAt, markerAt := -1, -1
	for i, p := range list.Plugins {
		switch {
		case p.ipamType() == pluginType && ipamAt < 0:
			ipamAt = i
		case p.ipamType() == "" && p.str("type") == pluginType && string(bytes.TrimSpace(p["ipam"])) != "null":
			// The plugin's rule (netconf): an entry of the plugin's type
			// whose ipam names no IPAM plugin (absent, {}, no type).
			markerAt = i
		}
	}
	if ipamAt < 0 {
		return false, nil
	}
	conf := func(i int) []byte { return list.Plugins[i].withNetwork(list.Name, list.CNIVersion) }
	c, err := netconf.Load(conf(ipamAt), "")
	if err != nil {
		return true, []finding{{file, "the plugin refuses this config: " + cniMessage(err), "correct the ipam section"}}
	}
	found := ipamFindings(file, c)
	found = append(found, markerFindings(file, single, len(list.Plugins), markerAt, pluginType)...)
	dirs := []struct{ what, dir string }{{"ipam dataDir", c.StoreDir}}
	if markerAt >= 0 {
		if m, err := netconf.Load(conf(markerAt), ""); err == nil && m.Marker {
			dirs = append(dirs, struct{ what, dir string }{"the commit marker's dataDir", m.StoreDir})
			if !filepath.IsAbs(m.StoreDir) {
				found = append(found, finding{file, fmt.Sprintf("the commit marker's dataDir %q is relative: resolved against the runtime's working directory", m.StoreDir), "use an absolute path"})
			}
		}
	}
	for _, d := range dirs {
		if filepath.Clean(d.dir) != filepath.Clean(dataDir) {
			found = append(found, finding{file, fmt.Sprintf("network %s: %s is %s but the daemon's --data-dir is %s: the daemon does not see this network's store", c.Network, d.what, d.dir, dataDir),
				"use one directory: the same dataDir in the ipam section and the commit marker, and as the daemon's --data-dir"})
		}
	}
	return true, found
}

// ipamFindings are what is wrong in an ipam section the plugin accepts.
func ipamFindings(file string, c *netconf.Config) []finding {
	var found []finding
	for _, k := range c.UnknownKeys {
		found = append(found, finding{file, fmt.Sprintf("network %s: %s is not a key hostlease (or host-local) reads: it is ignored", c.Network, k),
			"correct its name (a typo?) or remove it"})
	}
	for i, set := range c.RangeSets {
		for j, r := range set.Ranges {
			if !r.Subnet.Contains(r.Gateway) {
				found = append(found, finding{file, fmt.Sprintf("network %s: range set %d range %d: gateway %s is outside its subnet %s", c.Network, i, j, r.Gateway, r.Subnet),
					"give a gateway in the subnet, or none (the subnet's first address)"})
			}
		}
	}
	if !filepath.IsAbs(c.StoreDir) {
		found = append(found, finding{file, fmt.Sprintf("network %s: ipam dataDir %q is relative: resolved against the runtime's working directory", c.Network, c.StoreDir), "use an absolute path"})
	}
	return found
}

// markerFindings checks that the commit marker ends the plugin list.
func markerFindings(file string, single bool, n, markerAt int, pluginType string) []finding {
	marker := fmt.Sprintf(`{"type": %q}`, pluginType)
	switch {
	case single:
		return []finding{{file, "a single-plugin config has no commit marker: every allocation stays pending until the daemon sees its sandbox READY",
			"write it as a .conflist whose last plugin is " + marker}}
	case markerAt < 0:
		return []finding{{file, "no commit marker: every allocation stays pending until the daemon sees its sandbox READY",
			"add " + marker + " as the last plugin of the list"}}
	case markerAt != n-1:
		return []finding{{file, fmt.Sprintf("the commit marker is plugin %d of %d, not the last: a chain that fails after it is marked committed", markerAt+1, n),
			"move " + marker + " to the end of the plugin list"}}
	}
	return nil
}

func (p pluginConf) str(key string) string {
	var s string
	_ = json.Unmarshal(p[key], &s)
	return s
}

func (p pluginConf) ipamType() string {
	var ipam struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(p["ipam"], &ipam)
	return ipam.Type
}

// withNetwork is the plugin's config as the runtime passes it: with the
// list's name and cniVersion.
func (p pluginConf) withNetwork(name, version string) []byte {
	q := maps.Clone(map[string]json.RawMessage(p))
	if name != "" {
		q["name"], _ = json.Marshal(name)
	}
	if version != "" {
		q["cniVersion"], _ = json.Marshal(version)
	}
	b, _ := json.Marshal(q)
	return b
}

// cniMessage is a CNI error's message with its code.
func cniMessage(err error) string {
	var e *types.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%s (CNI error %d)", e.Msg, e.Code)
	}
	return err.Error()
}

// checkPluginVersion runs the installed plugin as an operator would (no
// CNI_COMMAND: it prints its version line on stderr) and compares its
// version with this binary's.
func (s doctorSetup) checkPluginVersion() []finding {
	path := filepath.Join(s.binDir, s.pluginType)
	if _, err := os.Stat(path); err != nil {
		return []finding{{path, "the plugin is not installed: " + unwrapPathErr(err).Error(), "hostlease-gc install-cni --to " + s.binDir}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	_ = cmd.Run() // exits 1 without CNI_COMMAND, after the version line
	line, _, _ := strings.Cut(errOut.String(), "\n")
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "hostlease" {
		return []finding{{path, fmt.Sprintf("not a hostlease plugin (it says %q)", line), "hostlease-gc install-cni --to " + s.binDir}}
	}
	if f[1] != daemon.Version {
		return []finding{{path, fmt.Sprintf("plugin version %s, daemon version %s", f[1], daemon.Version),
			"install the plugin of the daemon's release: hostlease-gc install-cni --to " + s.binDir}}
	}
	return nil
}

// checkDataDir checks the data dir's trust and each store in it: readable
// and writable. It returns the number of stores.
func checkDataDir(dir string) (int, []finding) {
	d, err := trustfs.OpenDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, []finding{{dir, "the data dir does not exist: the daemon sees no network",
			"pass the ipam dataDir as --data-dir (the plugin creates the dir at its first ADD)"}}
	case err != nil:
		return 0, []finding{{dir, "the data dir is refused: " + err.Error(), "make it a directory owned by root, not writable by group or others, not a symlink"}}
	}
	d.Close()
	files, err := daemon.FindStores(dir)
	if err != nil {
		return 0, []finding{{dir, err.Error(), "make the data dir readable"}}
	}
	var found []finding
	for _, f := range files {
		if _, err := readStore(f, cliLockTimeout); err != nil {
			found = append(found, finding{f.Path, "the store cannot be read: " + storeErr(f.Network, err), "repair it as said, or fix its permissions"})
			continue
		}
		if err := storeWritable(f.Path); err != nil {
			found = append(found, finding{f.Path, err.Error() + ": the plugin's ADD and DEL fail on it", "make the store file and its directory writable (a read-only mount? chattr +i?)"})
		}
	}
	return len(files), found
}

// checkSweep runs the daemon's sweep, dry, and reports what it could not
// see: CRI not answering, --netns-dir not verified.
func (s doctorSetup) checkSweep(stderr io.Writer) []finding {
	o := *s.daemon
	o.NoAPI = true
	rep, err := sweepDry(&o, stderr)
	if err != nil {
		return []finding{{o.CRIEndpoint, "CRI: " + err.Error(), "pass the runtime's socket as --cri-endpoint"}}
	}
	var found []finding
	if !rep.CRI.Complete {
		found = append(found, finding{o.CRIEndpoint, "CRI is not usable: " + rep.CRI.Why,
			"pass the runtime's socket as --cri-endpoint (containerd: unix:///run/containerd/containerd.sock, CRI-O: unix:///run/crio/crio.sock)"})
	}
	if rep.Netns.Warn() {
		found = append(found, finding{o.NetnsDir, "--netns-dir is not verified (" + rep.Netns.State + "): " + rep.Netns.Why,
			"pass the directory the runtime creates network namespaces in as --netns-dir (the DaemonSet mounts the host's)"})
	}
	return found
}
