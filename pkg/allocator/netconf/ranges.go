package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// errNullIP is returned where host-local's loader dereferences a nil pointer.
var errNullIP = errors.New("null is not an IP address")

// fieldError is an error of host-local's loader, with its text, and the field
// of the config it is about, which Load puts in front of the text.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }

func (e *fieldError) Unwrap() error { return e.err }

// rangeOrderError is a range whose rangeStart lies after its rangeEnd, both
// in its subnet. Its text is host-local's, which calls the pair's first
// address "not in network" (ipamFrom's texts are host-local's); Load says
// what is wrong instead (explain).
type rangeOrderError struct {
	start, end netip.Addr
	subnet     netip.Prefix
}

func (e *rangeOrderError) Error() string {
	return fmt.Sprintf("RangeStart %s not in network %s", e.start, e.subnet)
}

// explain is the error as Load reports it, naming both fields.
func (e *rangeOrderError) explain() string {
	return fmt.Sprintf("rangeStart %s is after rangeEnd %s (subnet %s): swap them", e.start, e.end, e.subnet)
}

// ipamFrom validates a decoded config's ipam section, runtimeConfig and args,
// with CNI_ARGS, as host-local's loader does. It returns the requested
// addresses, routes and resolvConf, and the canonical range sets in
// host-local's order: runtimeConfig ipRanges, then the legacy top-level range,
// then ipam.ranges.
//
// Guarantee: decode followed by ipamFrom accepts exactly what host-local's
// allocator.LoadIPAMConfig (containernetworking/plugins v1.9.1) accepts,
// yields the same canonical range sets (subnet, first and last address,
// gateway), routes, resolvConf, requested addresses and cniVersion, and on
// rejection returns an error with the same text. The exceptions, both
// deliberate, are listed on TestLoaderMatchesHostLocal, which proves the
// guarantee by running both loaders on the same corpus:
//
//   - where host-local crashes (a null entry in args.cni.ips or
//     runtimeConfig.ips), ipamFrom returns errNullIP;
//   - a JSON value of the wrong type yields the same *json.UnmarshalTypeError
//     (JSON path, value kind, offset), but encoding/json's text also names the
//     decoder's Go types, which are hostlease's own (and host-local's path
//     names its embedded Go struct: "ipam.Range.subnet"). Load reports such
//     an error through decodeError, which prints only the JSON path and kinds,
//     so what the user reads is the same.
//
// It is hostlease's own code, not host-local's: importing host-local's
// packages pulls netlink and knftables into the plugin, whose package init
// runs at every exec (TestPluginDoesNotImportHostLocal keeps them out).
func ipamFrom(n *confJSON, cniArgs string) (*IPAM, []allocator.StoredRangeSet, error) {
	if n.IPAM == nil {
		return nil, nil, errors.New("IPAM config missing 'ipam' key")
	}
	out := &IPAM{ResolvConf: n.IPAM.ResolvConf}
	if n.IPAM.Routes != nil {
		out.Routes = make([]*types.Route, len(n.IPAM.Routes))
		for i, rt := range n.IPAM.Routes {
			if rt != nil {
				out.Routes[i] = &rt.r
			}
		}
	}

	requested, err := requestedAddrs(n, cniArgs)
	if err != nil {
		return nil, nil, err
	}
	out.Requested = requested
	stored, err := rangeSets(n)
	if err != nil {
		return nil, nil, err
	}
	return out, stored, nil
}

// requestedAddrs gathers the requested addresses in host-local's order:
// CNI_ARGS' IP, then args.cni.ips, then runtimeConfig.ips. An entry that
// decoded to nothing ("") is kept as an invalid Addr so that it is refused
// after all are gathered, naming the first such entry.
func requestedAddrs(n *confJSON, cniArgs string) ([]netip.Addr, error) {
	var requested []netip.Addr
	if cniArgs != "" {
		var e envArgs
		if err := types.LoadArgs(cniArgs, &e); err != nil {
			return nil, err
		}
		if e.IP.addr.IsValid() {
			requested = append(requested, e.IP.addr)
		}
	}
	lists := []struct {
		field string
		addrs []*addrArg
	}{{"args.cni.ips", nil}, {"runtimeConfig.ips", n.RuntimeConfig.IPs}}
	if n.Args != nil && n.Args.CNI != nil {
		lists[0].addrs = n.Args.CNI.IPs
	}
	var unset string
	for _, list := range lists {
		for i, a := range list.addrs {
			if a == nil {
				return nil, &fieldError{fmt.Sprintf("%s[%d]", list.field, i), errNullIP}
			}
			if !a.addr.IsValid() && unset == "" {
				unset = fmt.Sprintf("%s[%d]", list.field, i)
			}
			requested = append(requested, a.addr)
		}
	}
	if unset != "" {
		return nil, &fieldError{unset, errors.New("cannot understand ip: IP <nil> not v4 nor v6")}
	}
	return requested, nil
}

// namedSets is the range sets n names, as written, in host-local's order:
// runtimeConfig ipRanges, then the legacy top-level range, then ipam.ranges.
// n.IPAM is not nil.
func namedSets(n *confJSON) []rangeSetJSON {
	sets := append([]rangeSetJSON(nil), n.RuntimeConfig.IPRanges...)
	if legacy := n.IPAM.rangeJSON(); legacy.Subnet.n.IP != nil {
		sets = append(sets, rangeSetJSON{legacy})
	}
	return append(sets, n.IPAM.Ranges...)
}

// rangeSets is the canonical range sets in host-local's order (runtimeConfig
// ipRanges, then the legacy top-level range, then ipam.ranges): each valid,
// at most one per family before CNI 0.3.0, no two overlapping.
func rangeSets(n *confJSON) ([]allocator.StoredRangeSet, error) {
	sets := namedSets(n)
	if len(sets) == 0 {
		return nil, &fieldError{"ipam.ranges", errors.New("no IP ranges specified")}
	}

	stored := make([]allocator.StoredRangeSet, len(sets))
	var v4Sets, v6Sets int
	for i, set := range sets {
		s, err := canonicalSet(set)
		if err != nil {
			return nil, &fieldError{"ipam.ranges", fmt.Errorf("invalid range set %d: %w", i, err)}
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
			return nil, &fieldError{"cniVersion", fmt.Errorf("CNI version %v does not support more than 1 address per family", n.CNIVersion)}
		}
	}
	for i := range stored {
		for j := i + 1; j < len(stored); j++ {
			if setsOverlap(stored[i], stored[j]) {
				return nil, &fieldError{"ipam.ranges", fmt.Errorf("range set %d overlaps with %d", i, j)}
			}
		}
	}
	return stored, nil
}

// canonicalSet validates a range set: not empty, each range valid, one address
// family, no two ranges sharing an address.
func canonicalSet(set rangeSetJSON) (allocator.StoredRangeSet, error) {
	if len(set) == 0 {
		return allocator.StoredRangeSet{}, errors.New("empty range set")
	}
	out := allocator.StoredRangeSet{Ranges: make([]allocator.StoredRange, 0, len(set))}
	for i := range set {
		r, err := canonicalRange(&set[i])
		if err != nil {
			return allocator.StoredRangeSet{}, err
		}
		if i > 0 && r.Start.Is4() != out.Ranges[0].Start.Is4() {
			return allocator.StoredRangeSet{}, errors.New("mixed address families")
		}
		out.Ranges = append(out.Ranges, r)
	}
	for i, a := range out.Ranges {
		for _, b := range out.Ranges[i+1:] {
			if rangesOverlap(a, b) {
				return allocator.StoredRangeSet{}, fmt.Errorf("subnets %s-%s and %s-%s overlap", a.Start, a.End, b.Start, b.End)
			}
		}
	}
	return out, nil
}

// canonicalRange checks one range and fills in its defaults: the gateway and
// the first address default to the subnet's second address, the last address
// to the subnet's last (IPv4: the one before broadcast).
func canonicalRange(r *rangeJSON) (allocator.StoredRange, error) {
	sub := r.Subnet.n
	if sub.IP == nil {
		return allocator.StoredRange{}, errors.New("IP <nil> not v4 nor v6")
	}
	addr := fromIP(sub.IP)
	ones, maskBits := sub.Mask.Size()
	if ones > maskBits-2 {
		// Written as net.IPNet prints it: an IPv4 address under an IPv6
		// mask (a 4in6 subnet) shows the mask's last 32 bits.
		return allocator.StoredRange{}, fmt.Errorf("Network %s/%d too small to allocate from", addr, ones-(maskBits-addr.BitLen()))
	}
	if addr.BitLen() != maskBits {
		return allocator.StoredRange{}, errors.New("IPNet IP and Mask version mismatch")
	}
	subnet := netip.PrefixFrom(addr, ones)
	network := subnet.Masked().Addr()
	if network != addr {
		return allocator.StoredRange{}, fmt.Errorf("Network has host bits set. For a subnet mask of length %d the network address is %s", ones, network)
	}

	out := allocator.StoredRange{Subnet: subnet, Gateway: network.Next(), Start: network.Next()}
	if gw := r.Gateway.get(); gw != nil {
		out.Gateway = fromIP(gw) // host-local checks neither family nor subnet
	}
	// The first address must lie in the subnet and not after a given last
	// address (an unordered pair is reported as a bad first address).
	givenEnd := fromIP(r.RangeEnd.get())
	if ip := r.RangeStart.get(); ip != nil {
		start := fromIP(ip)
		if !subnet.Contains(start) {
			return allocator.StoredRange{}, fmt.Errorf("RangeStart %s not in network %s", start, subnet)
		}
		if givenEnd.Is4() == start.Is4() && givenEnd.IsValid() && start.Compare(givenEnd) > 0 {
			return allocator.StoredRange{}, &rangeOrderError{start: start, end: givenEnd, subnet: subnet}
		}
		out.Start = start
	}
	if r.RangeEnd.get() != nil {
		if !subnet.Contains(givenEnd) || givenEnd.Less(out.Start) {
			return allocator.StoredRange{}, fmt.Errorf("RangeEnd %s not in network %s", givenEnd, subnet)
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
	last := fromIP(net.IP(b))
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
func rangesOverlap(a, b allocator.StoredRange) bool {
	return a.Contains(b.Start) || a.Contains(b.End) || b.Contains(a.Start) || b.Contains(a.End)
}

// setsOverlap reports whether any range of a overlaps any range of b.
func setsOverlap(a, b allocator.StoredRangeSet) bool {
	for _, x := range a.Ranges {
		for _, y := range b.Ranges {
			if rangesOverlap(x, y) {
				return true
			}
		}
	}
	return false
}
