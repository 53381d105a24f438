package netconf

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// decodeFast decodes the common shape of a plugin config into the same
// confJSON that json.Unmarshal would produce, reading the bytes in one pass
// (reader) instead of reflecting over the structs. The plugin is exec'd for
// every pod start and stop; a cold json.Unmarshal into struct types spends
// ~0.15 ms building its per-type caches in every process, this a fraction.
//
// Contract: when it returns true, its result is deeply equal to json.Unmarshal's
// and json.Unmarshal returns no error. It takes only the paths on which that
// holds by construction: every field holds the JSON kind its Go type expects,
// no key appears twice in an object, no key differs from a field's name only
// in case, every key and every string decoded is plain ASCII, and every
// address parses. On anything else (nulls and invalid JSON included) it
// returns false and decode falls back to json.Unmarshal, whose result also
// explains the errors. TestDecodeFastMatchesUnmarshal checks the contract on
// the loader's whole corpus, FuzzDecodeFast on any input.
func decodeFast(stdin []byte) (*confJSON, bool) {
	r := newReader(stdin)
	p := &confJSON{}
	r.object(topFields, func(key string) {
		switch key {
		case "name":
			p.Name = r.str()
		case "cniVersion":
			p.CNIVersion = r.str()
		case "type":
			p.Type = r.str()
		case "dataDir":
			p.DataDir = r.str()
		case "ipam":
			p.IPAM = r.ipam()
		case "cni.dev/valid-attachments":
			p.Valid = r.attachments()
		case "cni.dev/attachments":
			p.ValidAltSpell = r.attachments()
		case "runtimeConfig":
			r.object([]string{"ipRanges", "ips"}, func(key string) {
				if key == "ipRanges" {
					p.RuntimeConfig.IPRanges = r.rangeSets()
				} else {
					p.RuntimeConfig.IPs = r.addrs()
				}
			})
		case "args":
			p.Args = &argsJSON{}
			r.object([]string{"cni"}, func(string) {
				p.Args.CNI = &struct {
					IPs []*addrArg `json:"ips"`
				}{}
				r.object([]string{"ips"}, func(string) { p.Args.CNI.IPs = r.addrs() })
			})
		}
	})
	// json.Unmarshal refuses anything but white space after the value.
	if !r.end() {
		return nil, false
	}
	return p, true
}

// The JSON names of the fields each object type decodes (their Go types' tags).
var (
	topFields = []string{"name", "cniVersion", "type", "dataDir", "ipam",
		"cni.dev/valid-attachments", "cni.dev/attachments", "runtimeConfig", "args"}
	ipamFields = []string{"subnet", "rangeStart", "rangeEnd", "gateway", "Name", "type", "routes",
		"dataDir", "resolvConf", "ranges", "lockTimeout", "failStatusOnExhaustion"}
	rangeFields      = []string{"rangeStart", "rangeEnd", "subnet", "gateway"}
	routeFields      = []string{"dst", "gw", "mtu", "advmss", "priority", "table", "scope"}
	attachmentFields = []string{"containerID", "ifname"}
)

// ip is ipJSON's UnmarshalText: "" is a value without an address.
func (r *reader) ip() *ipJSON {
	s := r.str()
	if s == "" {
		return &ipJSON{}
	}
	ip := net.ParseIP(s)
	if ip == nil {
		r.ok = false
	}
	return &ipJSON{ip: ip}
}

// ipnet is types.IPNet's UnmarshalJSON.
func (r *reader) ipnet() types.IPNet {
	n, err := types.ParseCIDR(r.str())
	if err != nil {
		r.ok = false
		return types.IPNet{}
	}
	return types.IPNet(*n)
}

func (r *reader) ipam() *ipamJSON {
	c := &ipamJSON{}
	var legacy rangeJSON // the legacy range's fields sit in the ipam object
	r.object(ipamFields, func(key string) {
		switch key {
		case "subnet", "rangeStart", "rangeEnd", "gateway":
			r.rangeField(key, &legacy)
		case "Name":
			c.Name = r.str()
		case "type":
			c.Type = r.str()
		case "routes":
			c.Routes = r.routes()
		case "dataDir":
			c.DataDir = r.str()
		case "resolvConf":
			c.ResolvConf = r.str()
		case "ranges":
			c.Ranges = r.rangeSets()
		case "lockTimeout":
			c.LockTimeout = r.str()
		case "failStatusOnExhaustion":
			c.FailStatusOnExhaustion = r.boolean()
		}
	})
	c.Subnet, c.RangeStart, c.RangeEnd, c.Gateway = legacy.Subnet, legacy.RangeStart, legacy.RangeEnd, legacy.Gateway
	return c
}

// routes reads routes with a destination and optionally a gateway; the rarer
// route fields (mtu, table, ...) are left to json.Unmarshal.
func (r *reader) routes() []*routeJSON {
	out := []*routeJSON{}
	r.array(func() {
		rt := &routeJSON{}
		r.object(routeFields, func(key string) {
			switch key {
			case "dst":
				rt.r.Dst = net.IPNet(r.ipnet())
			case "gw":
				// types.Route decodes gw as a net.IP: "" is nil.
				rt.r.GW = r.ip().ip
			default:
				r.ok = false
			}
		})
		out = append(out, rt)
	})
	return out
}

func (r *reader) rangeSets() []rangeSetJSON {
	out := []rangeSetJSON{}
	r.array(func() {
		set := rangeSetJSON{}
		r.array(func() {
			var rg rangeJSON
			r.object(rangeFields, func(key string) { r.rangeField(key, &rg) })
			set = append(set, rg)
		})
		out = append(out, set)
	})
	return out
}

// rangeField reads the value of a range's field key into rg.
func (r *reader) rangeField(key string, rg *rangeJSON) {
	switch key {
	case "subnet":
		rg.Subnet.n = r.ipnet()
	case "rangeStart":
		rg.RangeStart = r.ip()
	case "rangeEnd":
		rg.RangeEnd = r.ip()
	case "gateway":
		rg.Gateway = r.ip()
	}
}

// addrs reads requested addresses (addrArg's UnmarshalText); a null entry is
// left to json.Unmarshal.
func (r *reader) addrs() []*addrArg {
	out := []*addrArg{}
	r.array(func() {
		a := &addrArg{}
		if err := a.UnmarshalText([]byte(r.str())); err != nil {
			r.ok = false
		}
		out = append(out, a)
	})
	return out
}

func (r *reader) attachments() []allocator.Attachment {
	out := []allocator.Attachment{}
	r.array(func() {
		var a allocator.Attachment
		r.object(attachmentFields, func(key string) {
			if key == "containerID" {
				a.ContainerID = r.str()
			} else {
				a.IfName = r.str()
			}
		})
		out = append(out, a)
	})
	return out
}
