// Package netconf loads one plugin invocation's CNI config (stdin and
// CNI_ARGS) in host-local's schema, so that hostlease is a drop-in
// replacement for host-local: it accepts exactly what host-local's loader
// accepts, with the same canonical range sets, routes, requested addresses
// and error texts (see ipamFrom), plus hostlease's own fields (ipam.lockTimeout,
// ipam.failStatusOnExhaustion, the commit marker's top-level dataDir, GC's
// valid attachments).
//
// A config is decoded once, by one of two tiers: a one-pass reader of the
// bytes for the common shape (decodeFast), and json.Unmarshal for everything
// else. A refused config's error is explained from what json.Unmarshal
// decoded: the *types.Error's code says what kind of input was wrong (4
// CNI_ARGS, 6 JSON that does not decode into the schema, 7 a value the schema
// refuses) and its message names the field.
package netconf

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// DefaultLockTimeout is how long a call waits for the store's lock unless the
// config's ipam.lockTimeout says otherwise.
const DefaultLockTimeout = 10 * time.Second

// MarkerTypes are the top-level "type" values under which the plugin runs as
// the commit marker. The plugin adds the name it was executed as before it
// loads a config.
var MarkerTypes = []string{"hostlease"}

// Config is everything one plugin invocation needs from its stdin and CNI_ARGS.
type Config struct {
	Network    string
	CNIVersion string
	// Marker is true when the plugin runs as the commit marker: a conflist
	// entry whose type is one of MarkerTypes and whose ipam names no IPAM
	// plugin (see isMarker).
	Marker bool
	// IPAM holds the ipam section's routes, resolvConf and requested IPs, and
	// RangeSets its canonical range sets, both as host-local's loader reads
	// them. Nil in marker mode.
	IPAM      *IPAM
	RangeSets []allocator.StoredRangeSet
	// StoreDir holds <network>.db; HostLocalDir holds host-local's <network>/.
	// An ipam dataDir sets both; the marker's top-level dataDir sets StoreDir.
	StoreDir     string
	HostLocalDir string
	LockTimeout  time.Duration
	// FailStatusOnExhaustion makes STATUS fail (code 50) when a range set is
	// full. Off by default: a STATUS error makes the node NotReady, and its
	// pods are evicted (see cmd/ipam/status.go).
	FailStatusOnExhaustion bool
	// UnknownKeys lists, sorted, the keys of the ipam section (and of its
	// ranges) that no field reads: typos such as "rangeStrat" or "gatway".
	// The config is accepted, as host-local accepts it; the plugin warns.
	UnknownKeys []string
	// ValidAttachments is the GC verb's list of attachments to keep
	// ("cni.dev/valid-attachments", or "cni.dev/attachments"); nil when the
	// config has neither.
	ValidAttachments []allocator.Attachment
	// NoRange is true for an ipam section that names no range, accepted by
	// LoadForRelease only: IPAM and RangeSets are nil.
	NoRange bool
}

// IPAM is what an ADD needs from the ipam section besides the range sets.
type IPAM struct {
	Routes     []*types.Route
	ResolvConf string
	// Requested lists the addresses asked for, in host-local's order: CNI_ARGS
	// IP=, then args.cni.ips, then runtimeConfig.ips. IPv4 is never 4in6.
	Requested []netip.Addr
}

// Load parses a plugin invocation's config. Every error is a *types.Error
// whose code says what kind of input was wrong and whose message names the
// field. Errors are reported in this order: JSON that does not decode;
// hostlease's own fields (name, the marker's shape, lockTimeout); the ipam
// section as host-local checks it. A malformed CNI_ARGS is reported (code 4)
// ahead of errors in the JSON and in the ipam section, which host-local reads
// together with it.
func Load(stdin []byte, cniArgs string) (*Config, error) {
	return load(stdin, cniArgs, false)
}

// LoadForRelease parses a DEL's config. It is Load, except that an ipam
// section naming no range (NamesNoRange) is accepted, with NoRange set: a
// release finds its records by attachment, in the store the network's name
// and dataDir (or the default) name, and needs no range. A runtime that
// rebuilds each plugin's config from CNI's schema hands DEL such a section
// (Multus v4.3.0's DEL of its cluster network: no ranges, no dataDir); a DEL
// refused for it would be retried for ever and block the pod's deletion.
// Every other field is checked as Load checks it.
func LoadForRelease(stdin []byte, cniArgs string) (*Config, error) {
	return load(stdin, cniArgs, true)
}

func load(stdin []byte, cniArgs string, rangeOptional bool) (*Config, error) {
	p, err := decode(stdin)
	if err != nil {
		return nil, cniArgsFirst(cniArgs, explainDecodeError(p, err))
	}
	if !allocator.ValidNetworkName(p.Name) {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("name: %q is not a valid network name (letters, digits, '_', '.', '-'; starting with a letter or digit)", p.Name), "")
	}
	c := &Config{
		Network:          p.Name,
		CNIVersion:       p.CNIVersion,
		StoreDir:         allocator.DefaultStoreDir,
		HostLocalDir:     allocator.DefaultHostLocalDir,
		LockTimeout:      DefaultLockTimeout,
		ValidAttachments: p.Valid,
	}
	if c.ValidAttachments == nil {
		c.ValidAttachments = p.ValidAltSpell
	}
	if isMarker(p) {
		c.Marker = true
		if p.DataDir != "" {
			c.StoreDir = p.DataDir
		}
		return c, nil
	}
	if p.IPAM == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "IPAM config missing 'ipam' key", "")
	}
	if p.IPAM.DataDir != "" {
		c.StoreDir, c.HostLocalDir = p.IPAM.DataDir, p.IPAM.DataDir
	}
	if p.IPAM.LockTimeout != "" {
		d, err := time.ParseDuration(p.IPAM.LockTimeout)
		if err != nil || d <= 0 {
			return nil, types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("ipam.lockTimeout: %q is not a positive duration (e.g. \"10s\")", p.IPAM.LockTimeout), "")
		}
		c.LockTimeout = d
	}
	if p.IPAM.FailStatusOnExhaustion != nil {
		c.FailStatusOnExhaustion = *p.IPAM.FailStatusOnExhaustion
	}
	if rangeOptional && len(namedSets(p)) == 0 {
		if err := cniArgsFirst(cniArgs, nil); err != nil {
			return nil, err
		}
		c.NoRange, c.UnknownKeys = true, p.unknown
		return c, nil
	}
	ipam, sets, err := ipamFrom(p, cniArgs)
	if err != nil {
		return nil, cniArgsFirst(cniArgs, explainIPAMError(err))
	}
	c.IPAM, c.RangeSets, c.UnknownKeys = ipam, sets, p.unknown
	return c, nil
}

// isMarker reports whether p is the commit marker's entry: the same binary
// placed in a conflist as a plugin of its own, so its top-level type is one
// of MarkerTypes, with an ipam that names no IPAM plugin: no ipam key, or an
// ipam object without a type ({} included, which is what a runtime that
// rebuilds each plugin's config from CNI's own schema hands it, e.g.
// Multus's STATUS through libcni). Run as an IPAM plugin, the binary was
// found by the ipam's type, so a config whose ipam has a type is an IPAM
// config whatever its top-level type. "ipam": null is not a marker: it is an
// IPAM config missing its section, refused as host-local refuses it.
func isMarker(p *confJSON) bool {
	if !slices.Contains(MarkerTypes, p.Type) || p.ipamNull {
		return false
	}
	return p.IPAM == nil || p.IPAM.Type == ""
}

// NamesNoRange reports whether stdin is an IPAM config (not the commit
// marker's) whose ipam section names no address range: no ipam.ranges, no
// legacy ipam.subnet and no runtimeConfig.ipRanges, so that Load refuses it
// with "ipam.ranges: no IP ranges specified". STATUS answers such a config as
// host-local does (success): it names no range and, often, not the dataDir
// either (a runtime that rebuilds the plugin's config from CNI's schema
// drops both), so there is nothing of this network to check. ADD and CHECK
// still refuse it through Load; DEL takes it through LoadForRelease. False
// when stdin does not decode or has no ipam section.
func NamesNoRange(stdin []byte) bool {
	p, err := decode(stdin)
	if err != nil || p.IPAM == nil || isMarker(p) {
		return false
	}
	return len(namedSets(p)) == 0
}

// cniArgsFirst returns a code 4 error naming CNI_ARGS if host-local's parse of
// cniArgs refuses it, else err.
func cniArgsFirst(cniArgs string, err error) error {
	if cniArgs == "" {
		return err
	}
	var e envArgs
	if aerr := types.LoadArgs(cniArgs, &e); aerr != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %v", aerr), "")
	}
	return err
}

// explainIPAMError turns an error of ipamFrom (host-local's wording) into a
// code 7 error naming the field, where ipamFrom knows it.
func explainIPAMError(err error) error {
	msg := err.Error()
	var oe *rangeOrderError
	if errors.As(err, &oe) {
		msg = strings.Replace(msg, oe.Error(), oe.explain(), 1)
	}
	if fe, ok := err.(*fieldError); ok {
		msg = fe.field + ": " + msg
	}
	return types.NewError(types.ErrInvalidNetworkConfig, msg, "")
}
