package allocator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// IPAM is what an ADD needs from the ipam section besides the range sets.
type IPAM struct {
	Routes     []*types.Route
	ResolvConf string
	// Requested lists the addresses asked for, in host-local's order: CNI_ARGS
	// IP=, then args.cni.ips, then runtimeConfig.ips. IPv4 is never 4in6.
	Requested []netip.Addr
}

// errNullIP is returned where host-local's loader dereferences a nil pointer.
var errNullIP = errors.New("null is not an IP address")

// The decoding types mirror the JSON that host-local's loader reads, field for
// field, with the same Go field types where the value is an address or CIDR
// (net.IP, types.IPNet, types.Route), so that decoding accepts, refuses and
// words errors exactly as it does. Everything after decoding works on netip.
type (
	netConfJSON struct {
		Name          string          `json:"name"`
		CNIVersion    string          `json:"cniVersion"`
		IPAM          *ipamJSON       `json:"ipam"`
		RuntimeConfig runtimeConfJSON `json:"runtimeConfig"`
		Args          *argsJSON       `json:"args"`
	}
	argsJSON struct {
		CNI *struct {
			IPs []*addrArg `json:"ips"`
		} `json:"cni"`
	}
	runtimeConfJSON struct {
		IPRanges []rangeSetJSON `json:"ipRanges"`
		IPs      []*addrArg     `json:"ips"`
	}
	ipamJSON struct {
		// The legacy single range sits directly in the ipam object.
		Subnet     types.IPNet `json:"subnet"`
		RangeStart net.IP      `json:"rangeStart"`
		RangeEnd   net.IP      `json:"rangeEnd"`
		Gateway    net.IP      `json:"gateway"`
		// host-local decodes an untagged Name field here, so a non-string
		// "name" inside ipam is a type error there; keep it one here.
		Name       string
		Type       string         `json:"type"`
		Routes     []*types.Route `json:"routes"`
		DataDir    string         `json:"dataDir"`
		ResolvConf string         `json:"resolvConf"`
		Ranges     []rangeSetJSON `json:"ranges"`
	}
	rangeSetJSON []rangeJSON
	rangeJSON    struct {
		RangeStart net.IP      `json:"rangeStart"`
		RangeEnd   net.IP      `json:"rangeEnd"`
		Subnet     types.IPNet `json:"subnet"`
		Gateway    net.IP      `json:"gateway"`
	}
)

// envArgs is what CNI_ARGS may carry. types.LoadArgs looks keys up by Go field
// name, so the fields (including the embedded CommonArgs' own name) are the
// same as host-local's.
type envArgs struct {
	types.CommonArgs
	IP addrArg
}

// addrArg is a requested address: "10.0.0.5" or "10.0.0.5/24" (the prefix
// length is ignored). Empty text leaves it unset.
type addrArg struct{ addr netip.Addr }

func (a *addrArg) UnmarshalText(text []byte) error {
	*a = addrArg{}
	if len(text) == 0 {
		return nil
	}
	s := string(text)
	var ip net.IP
	if strings.Contains(s, "/") {
		ip, _, _ = net.ParseCIDR(s)
	} else {
		ip = net.ParseIP(s)
	}
	if ip == nil {
		return fmt.Errorf("invalid IP address %s", s)
	}
	a.addr = fromIP(ip)
	return nil
}

// fromIP converts a parsed net.IP (nil for none) to an unmapped netip.Addr.
func fromIP(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// loadIPAM parses and validates the ipam section of stdin, with CNI_ARGS.
// It returns the canonical range sets in host-local's order: runtimeConfig
// ipRanges, then the legacy top-level range, then ipam.ranges.
//
// Guarantee: for every config and CNI_ARGS, loadIPAM accepts exactly what
// host-local's allocator.LoadIPAMConfig (containernetworking/plugins v1.9.1)
// accepts, yields the same canonical range sets (subnet, first and last
// address, gateway), routes, resolvConf, requested addresses and cniVersion,
// and on rejection returns an error with the same text. The exceptions, both
// deliberate, are listed on TestLoadIPAMMatchesHostLocal in ipamconf_test.go,
// which proves the guarantee by running both loaders on the same corpus:
//
//   - where host-local crashes (a null entry in args.cni.ips or
//     runtimeConfig.ips), loadIPAM returns errNullIP;
//   - a JSON value of the wrong type yields the same *json.UnmarshalTypeError
//     (JSON path, value kind, offset), but encoding/json's text also names the
//     decoder's Go types, which are hostlease's own (and host-local's path
//     names its embedded Go struct: "ipam.Range.subnet"). hostlease reports
//     such an error through decodeError, which prints only the JSON path and
//     kinds, so what the user reads is the same.
//
// It is hostlease's own code, not host-local's: importing host-local's
// packages pulls netlink and knftables into the plugin, whose package init
// runs at every exec (TestPluginDoesNotImportHostLocal keeps them out).
func loadIPAM(stdin []byte, cniArgs string) (*IPAM, []StoredRangeSet, string, error) {
	var n netConfJSON
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, nil, "", err
	}
	return ipamFrom(&n, cniArgs)
}

// ipamFrom is loadIPAM after decoding.
func ipamFrom(n *netConfJSON, cniArgs string) (*IPAM, []StoredRangeSet, string, error) {
	if n.IPAM == nil {
		return nil, nil, "", errors.New("IPAM config missing 'ipam' key")
	}
	out := &IPAM{Routes: n.IPAM.Routes, ResolvConf: n.IPAM.ResolvConf}

	// Requested addresses. An entry that decoded to nothing ("") is kept as
	// an invalid Addr so that it is refused below, after all are gathered.
	if cniArgs != "" {
		var e envArgs
		if err := types.LoadArgs(cniArgs, &e); err != nil {
			return nil, nil, "", err
		}
		if e.IP.addr.IsValid() {
			out.Requested = append(out.Requested, e.IP.addr)
		}
	}
	var lists [][]*addrArg
	if n.Args != nil && n.Args.CNI != nil {
		lists = append(lists, n.Args.CNI.IPs)
	}
	lists = append(lists, n.RuntimeConfig.IPs)
	for _, list := range lists {
		for _, a := range list {
			if a == nil {
				return nil, nil, "", errNullIP
			}
			out.Requested = append(out.Requested, a.addr)
		}
	}
	for _, a := range out.Requested {
		if !a.IsValid() {
			return nil, nil, "", errors.New("cannot understand ip: IP <nil> not v4 nor v6")
		}
	}

	// Range sets: runtime ones first, then the legacy range, then ranges.
	sets := append([]rangeSetJSON(nil), n.RuntimeConfig.IPRanges...)
	if legacy := n.IPAM; legacy.Subnet.IP != nil {
		sets = append(sets, rangeSetJSON{{
			Subnet: legacy.Subnet, RangeStart: legacy.RangeStart, RangeEnd: legacy.RangeEnd, Gateway: legacy.Gateway,
		}})
	}
	sets = append(sets, n.IPAM.Ranges...)
	if len(sets) == 0 {
		return nil, nil, "", errors.New("no IP ranges specified")
	}

	stored := make([]StoredRangeSet, len(sets))
	var v4Sets, v6Sets int
	for i, set := range sets {
		s, err := canonicalSet(set)
		if err != nil {
			return nil, nil, "", fmt.Errorf("invalid range set %d: %s", i, err)
		}
		stored[i] = s
		if s.Ranges[0].Start.Is4() {
			v4Sets++
		} else {
			v6Sets++
		}
	}
	// Results before CNI 0.3.0 hold one address per family.
	if v4Sets > 1 || v6Sets > 1 {
		if ok, _ := version.GreaterThanOrEqualTo(n.CNIVersion, "0.3.0"); !ok {
			return nil, nil, "", fmt.Errorf("CNI version %v does not support more than 1 address per family", n.CNIVersion)
		}
	}
	for i := range stored {
		for j := i + 1; j < len(stored); j++ {
			if setsOverlap(stored[i], stored[j]) {
				return nil, nil, "", fmt.Errorf("range set %d overlaps with %d", i, j)
			}
		}
	}
	return out, stored, n.CNIVersion, nil
}

// canonicalSet validates a range set: not empty, each range valid, one address
// family, no two ranges sharing an address.
func canonicalSet(set rangeSetJSON) (StoredRangeSet, error) {
	if len(set) == 0 {
		return StoredRangeSet{}, errors.New("empty range set")
	}
	out := StoredRangeSet{Ranges: make([]StoredRange, 0, len(set))}
	for i := range set {
		r, err := canonicalRange(&set[i])
		if err != nil {
			return StoredRangeSet{}, err
		}
		if i > 0 && r.Start.Is4() != out.Ranges[0].Start.Is4() {
			return StoredRangeSet{}, errors.New("mixed address families")
		}
		out.Ranges = append(out.Ranges, r)
	}
	for i, a := range out.Ranges {
		for _, b := range out.Ranges[i+1:] {
			if rangesOverlap(a, b) {
				return StoredRangeSet{}, fmt.Errorf("subnets %s-%s and %s-%s overlap", a.Start, a.End, b.Start, b.End)
			}
		}
	}
	return out, nil
}

// canonicalRange checks one range and fills in its defaults: the gateway and
// the first address default to the subnet's second address, the last address
// to the subnet's last (IPv4: the one before broadcast).
func canonicalRange(r *rangeJSON) (StoredRange, error) {
	if r.Subnet.IP == nil {
		return StoredRange{}, errors.New("IP <nil> not v4 nor v6")
	}
	addr := fromIP(r.Subnet.IP)
	ones, maskBits := r.Subnet.Mask.Size()
	if ones > maskBits-2 {
		// Written as net.IPNet prints it: an IPv4 address under an IPv6
		// mask (a 4in6 subnet) shows the mask's last 32 bits.
		return StoredRange{}, fmt.Errorf("Network %s/%d too small to allocate from", addr, ones-(maskBits-addr.BitLen()))
	}
	if addr.BitLen() != maskBits {
		return StoredRange{}, errors.New("IPNet IP and Mask version mismatch")
	}
	subnet := netip.PrefixFrom(addr, ones)
	network := subnet.Masked().Addr()
	if network != addr {
		return StoredRange{}, fmt.Errorf("Network has host bits set. For a subnet mask of length %d the network address is %s", ones, network)
	}

	out := StoredRange{Subnet: subnet, Gateway: network.Next(), Start: network.Next()}
	if r.Gateway != nil {
		out.Gateway = fromIP(r.Gateway) // host-local checks neither family nor subnet
	}
	// The first address must lie in the subnet and not after a given last
	// address (an unordered pair is reported as a bad first address).
	givenEnd := fromIP(r.RangeEnd)
	if r.RangeStart != nil {
		start := fromIP(r.RangeStart)
		if !subnet.Contains(start) || givenEnd.Is4() == start.Is4() && givenEnd.IsValid() && start.Compare(givenEnd) > 0 {
			return StoredRange{}, fmt.Errorf("RangeStart %s not in network %s", start, subnet)
		}
		out.Start = start
	}
	if r.RangeEnd != nil {
		if !subnet.Contains(givenEnd) || givenEnd.Less(out.Start) {
			return StoredRange{}, fmt.Errorf("RangeEnd %s not in network %s", givenEnd, subnet)
		}
		out.End = givenEnd
	} else {
		out.End = lastAddr(subnet)
	}
	return out, nil
}

// lastAddr is the subnet's last address, or for IPv4 the one before it (the
// broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		// Set every bit of byte i that lies past the prefix.
		if netBits := p.Bits() - 8*i; netBits < 8 {
			b[i] |= 0xff >> max(netBits, 0)
		}
	}
	last := fromIP(b)
	if last.Is4() {
		last = last.Prev()
	}
	return last
}

// rangesOverlap reports whether either range holds the other's first or last
// address. For well-formed ranges that is "share an address"; a range whose
// first address is past its last (host-local accepts a rangeStart beyond the
// default rangeEnd) holds no address, yet overlaps a range holding one of
// its ends, as in host-local.
func rangesOverlap(a, b StoredRange) bool {
	return a.Contains(b.Start) || a.Contains(b.End) || b.Contains(a.Start) || b.Contains(a.End)
}

// setsOverlap reports whether any range of a overlaps any range of b.
func setsOverlap(a, b StoredRangeSet) bool {
	for _, x := range a.Ranges {
		for _, y := range b.Ranges {
			if rangesOverlap(x, y) {
				return true
			}
		}
	}
	return false
}
