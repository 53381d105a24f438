package allocator

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Default directories. The store lives apart from host-local's state unless
// the config names a dataDir, in which case both live under it.
const (
	DefaultStoreDir     = "/var/lib/cni/hostlease"
	DefaultHostLocalDir = "/var/lib/cni/networks"
	DefaultLockTimeout  = 10 * time.Second
)

// Config is everything one plugin invocation needs from its stdin and CNI_ARGS.
type Config struct {
	Network    string
	CNIVersion string
	// Marker is true when the plugin runs as the commit marker (a conflist entry
	// of type hostlease without an ipam section).
	Marker bool
	// IPAM holds the ipam section's routes, resolvConf and requested IPs, and
	// RangeSets its canonical range sets, both as host-local's loader reads
	// them (see loadIPAM). Nil in marker mode.
	IPAM      *IPAM
	RangeSets []StoredRangeSet
	// StoreDir holds <network>.db; HostLocalDir holds host-local's <network>/.
	StoreDir     string
	HostLocalDir string
	LockTimeout  time.Duration
	// FailStatusOnExhaustion makes STATUS fail (code 50) when a range set is
	// full. Off by default: a STATUS error makes the node NotReady, and its
	// pods are evicted (see cmd/ipam/status.go).
	FailStatusOnExhaustion bool
	// ValidAttachments is the GC verb's list of attachments to keep.
	ValidAttachments []Attachment
	// RawPrevResult is the chain's result so far (marker and CHECK).
	RawPrevResult map[string]any
}

// Attachment is one (containerID, ifname) the runtime still uses.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// ownConf is the part of the config that only hostlease reads; the ipam
// section's ranges, routes and requested IPs are read by loadIPAM, which
// validates them exactly as host-local does.
type ownConf struct {
	Name          string         `json:"name"`
	CNIVersion    string         `json:"cniVersion"`
	Type          string         `json:"type"`
	DataDir       string         `json:"dataDir"`
	IPAM          *ownIPAM       `json:"ipam"`
	PrevResult    map[string]any `json:"prevResult"`
	Valid         []Attachment   `json:"cni.dev/valid-attachments"`
	ValidAltSpell []Attachment   `json:"cni.dev/attachments"`
}

type ownIPAM struct {
	DataDir                string `json:"dataDir"`
	LockTimeout            string `json:"lockTimeout"`
	FailStatusOnExhaustion *bool  `json:"failStatusOnExhaustion"`
}

// pluginConfJSON is the union of ownConf and netConfJSON (host-local's view),
// so that the common, valid config is decoded once: every field keeps the JSON
// name and Go type it has in its own struct, and "ipam" holds both views'
// fields. Decoding it succeeds exactly when decoding both succeeds, with the
// same values; when it fails, LoadConfig reruns the two decodes on their own so
// that errors are reported (and prioritised) as before.
type pluginConfJSON struct {
	Name          string          `json:"name"`
	CNIVersion    string          `json:"cniVersion"`
	Type          string          `json:"type"`
	DataDir       string          `json:"dataDir"`
	IPAM          *pluginIPAMJSON `json:"ipam"`
	PrevResult    map[string]any  `json:"prevResult"`
	Valid         []Attachment    `json:"cni.dev/valid-attachments"`
	ValidAltSpell []Attachment    `json:"cni.dev/attachments"`
	RuntimeConfig runtimeConfJSON `json:"runtimeConfig"`
	Args          *argsJSON       `json:"args"`
}

type pluginIPAMJSON struct {
	ipamJSON                      // host-local's fields, dataDir among them
	LockTimeout            string `json:"lockTimeout"`
	FailStatusOnExhaustion *bool  `json:"failStatusOnExhaustion"`
}

// views splits the union back into the two structs it stands for.
func (p *pluginConfJSON) views() (ownConf, *netConfJSON) {
	own := ownConf{Name: p.Name, CNIVersion: p.CNIVersion, Type: p.Type, DataDir: p.DataDir,
		PrevResult: p.PrevResult, Valid: p.Valid, ValidAltSpell: p.ValidAltSpell}
	n := &netConfJSON{Name: p.Name, CNIVersion: p.CNIVersion, RuntimeConfig: p.RuntimeConfig, Args: p.Args}
	if p.IPAM != nil {
		own.IPAM = &ownIPAM{DataDir: p.IPAM.DataDir, LockTimeout: p.IPAM.LockTimeout, FailStatusOnExhaustion: p.IPAM.FailStatusOnExhaustion}
		n.IPAM = &p.IPAM.ipamJSON
	}
	return own, n
}

// LoadConfig parses a plugin invocation's config. Every error is a *types.Error
// whose code says what kind of input was wrong and whose message names the field.
func LoadConfig(stdin []byte, cniArgs string) (*Config, error) {
	p, ok := decodeConfigFast(stdin)
	if !ok {
		p = &pluginConfJSON{}
		if err := json.Unmarshal(stdin, p); err != nil {
			return loadConfigSeparately(stdin, cniArgs)
		}
	}
	own, n := p.views()
	return buildConfig(stdin, cniArgs, own, func() (*IPAM, []StoredRangeSet, string, error) {
		return ipamFrom(n, cniArgs)
	})
}

// loadConfigSeparately decodes hostlease's own fields and then host-local's
// view, each on its own: the error of the first that fails is the one reported.
func loadConfigSeparately(stdin []byte, cniArgs string) (*Config, error) {
	var own ownConf
	if err := json.Unmarshal(stdin, &own); err != nil {
		return nil, decodeError(err)
	}
	return buildConfig(stdin, cniArgs, own, func() (*IPAM, []StoredRangeSet, string, error) {
		return loadIPAM(stdin, cniArgs)
	})
}

// buildConfig checks hostlease's own fields and, unless the plugin runs as the
// commit marker, loads the ipam section with load.
func buildConfig(stdin []byte, cniArgs string, own ownConf, load func() (*IPAM, []StoredRangeSet, string, error)) (*Config, error) {
	if err := validNetworkName(own.Name); err != nil {
		return nil, err
	}
	c := &Config{
		Network:                own.Name,
		CNIVersion:             own.CNIVersion,
		StoreDir:               DefaultStoreDir,
		HostLocalDir:           DefaultHostLocalDir,
		LockTimeout:            DefaultLockTimeout,
		FailStatusOnExhaustion: false,
		ValidAttachments:       own.Valid,
		RawPrevResult:          own.PrevResult,
	}
	if c.ValidAttachments == nil {
		c.ValidAttachments = own.ValidAltSpell
	}
	if own.IPAM == nil {
		// Commit marker: the same binary placed last in a conflist, which
		// has a top-level type naming it and no ipam key at all. Anything
		// else without an ipam section is an IPAM config missing it, refused
		// as host-local refuses it ("ipam": null included).
		if !isMarkerType(own.Type) || hasIPAMKey(stdin) {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, "IPAM config missing 'ipam' key", "")
		}
		c.Marker = true
		if own.DataDir != "" {
			c.StoreDir = own.DataDir
		}
		return c, nil
	}
	if own.IPAM.DataDir != "" {
		c.StoreDir, c.HostLocalDir = own.IPAM.DataDir, own.IPAM.DataDir
	}
	if own.IPAM.LockTimeout != "" {
		d, err := time.ParseDuration(own.IPAM.LockTimeout)
		if err != nil || d <= 0 {
			return nil, types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("ipam.lockTimeout: %q is not a positive duration (e.g. \"10s\")", own.IPAM.LockTimeout), "")
		}
		c.LockTimeout = d
	}
	if own.IPAM.FailStatusOnExhaustion != nil {
		c.FailStatusOnExhaustion = *own.IPAM.FailStatusOnExhaustion
	}
	ipam, sets, version, err := load()
	if err != nil {
		// Only now look at CNI_ARGS on its own: a malformed value there is the
		// caller's environment, not the config (and the hot path parses it once).
		if aerr := checkCNIArgs(cniArgs); aerr != nil {
			return nil, aerr
		}
		return nil, explainIPAMError(stdin, err)
	}
	c.IPAM, c.RangeSets, c.CNIVersion = ipam, sets, version
	return c, nil
}

// checkCNIArgs parses CNI_ARGS as host-local does, so that a malformed value is
// reported as a bad environment (code 4) naming CNI_ARGS.
func checkCNIArgs(cniArgs string) error {
	if cniArgs == "" {
		return nil
	}
	var e envArgs
	if err := types.LoadArgs(cniArgs, &e); err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %v", err), "")
	}
	return nil
}

// validNetworkName enforces CNI's network name rule; the name becomes a file
// name, so anything else could escape the data dir.
func validNetworkName(name string) error {
	ok := name != ""
	for i := 0; ok && i < len(name); i++ {
		ch := name[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
		ok = alnum || i > 0 && (ch == '_' || ch == '.' || ch == '-')
	}
	if !ok {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("name: %q is not a valid network name (letters, digits, '_', '.', '-'; starting with a letter or digit)", name), "")
	}
	return nil
}

// MarkerTypes are the top-level "type" values under which the plugin runs as
// the commit marker (the plugin adds the name it was executed as).
var MarkerTypes = []string{"hostlease"}

func isMarkerType(t string) bool {
	for _, m := range MarkerTypes {
		if t == m {
			return true
		}
	}
	return false
}

// hasIPAMKey reports whether the config has an "ipam" key (whose value,
// given that the section did not decode to one, is null).
func hasIPAMKey(stdin []byte) bool {
	var probe struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	return json.Unmarshal(stdin, &probe) == nil && probe.IPAM != nil
}
