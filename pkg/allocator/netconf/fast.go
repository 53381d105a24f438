package netconf

import (
	"net"
	"reflect"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// decodeFast decodes the common shape of a plugin config into the same
// confJSON that json.Unmarshal would produce, reading the bytes in one pass
// (reader) instead of reflecting over the structs. The plugin is exec'd for
// every pod start and stop, and a cold json.Unmarshal into these types builds
// its per-type caches in every process. make bench measures the gain against
// the same code built with -tags nofastdecode (docs/benchmarks.md, "Fast
// paths").
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
			r.object(runtimeFields, func(key string) {
				switch key {
				case "ipRanges":
					p.RuntimeConfig.IPRanges = r.rangeSets("")
				case "ips":
					p.RuntimeConfig.IPs = r.addrs()
				default:
					r.ok = false
				}
			})
		case "args":
			p.Args = &argsJSON{}
			r.object(argsFields, func(key string) {
				if key != "cni" {
					r.ok = false
					return
				}
				p.Args.CNI = &cniArgsJSON{}
				r.object(cniArgsFields, func(key string) {
					if key != "ips" {
						r.ok = false
						return
					}
					p.Args.CNI.IPs = r.addrs()
				})
			})
		default:
			r.ok = false // a field of confJSON this reader does not read
		}
	})
	// json.Unmarshal refuses anything but white space after the value.
	if !r.end() {
		return nil, false
	}
	if len(r.unknown) > 0 {
		slices.Sort(r.unknown)
		p.unknown = r.unknown
	}
	return p, true
}

// The JSON names of the fields each object type decodes, read from the Go
// types' tags as encoding/json reads them (jsonFields), so that the lists
// cannot drift from the types: the reader skips any other key (as
// json.Unmarshal ignores it), and a listed key it has no case for ends the
// fast path. types.Route decodes through its own UnmarshalJSON, whose fields
// are not visible here: routes() passes every key to its callback (nil list).
var (
	topFields        = jsonFields(reflect.TypeFor[confJSON]())
	ipamFields       = jsonFields(reflect.TypeFor[ipamJSON]())
	rangeFields      = jsonFields(reflect.TypeFor[rangeJSON]())
	runtimeFields    = jsonFields(reflect.TypeFor[runtimeConfJSON]())
	argsFields       = jsonFields(reflect.TypeFor[argsJSON]())
	cniArgsFields    = jsonFields(reflect.TypeFor[cniArgsJSON]())
	attachmentFields = jsonFields(reflect.TypeFor[allocator.Attachment]())
)

// jsonFields is the JSON names encoding/json decodes into struct type t: each
// exported field's tag name, or its Go name when the tag gives none; fields
// tagged "-" and unexported ones are not decoded. (The types read here embed
// no structs.)
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || name == "-":
			continue
		case name == "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

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
	r.objectAt(func() string { return "ipam" }, ipamFields, func(key string) {
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
			c.Ranges = r.rangeSets("ipam.ranges")
		case "lockTimeout":
			c.LockTimeout = r.str()
		case "failStatusOnExhaustion":
			c.FailStatusOnExhaustion = r.boolean()
		default:
			r.ok = false
		}
	})
	c.Subnet, c.RangeStart, c.RangeEnd, c.Gateway = legacy.Subnet, legacy.RangeStart, legacy.RangeEnd, legacy.Gateway
	return c
}

// routes reads routes with a destination and optionally a gateway; any other
// key (the rarer route fields: mtu, table, ...) is left to json.Unmarshal.
func (r *reader) routes() []*routeJSON {
	out := []*routeJSON{}
	r.array(func() {
		rt := &routeJSON{}
		r.object(nil, func(key string) {
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

// rangeSets reads range sets; the unknown keys of their ranges are noted
// under path (ipam.ranges[i][j]) unless path is "".
func (r *reader) rangeSets(path string) []rangeSetJSON {
	out := []rangeSetJSON{}
	r.array(func() {
		set := rangeSetJSON{}
		r.array(func() {
			var rg rangeJSON
			var at func() string
			if path != "" {
				i, j := len(out), len(set)
				at = func() string { return rangePath(path, i, j) }
			}
			r.objectAt(at, rangeFields, func(key string) { r.rangeField(key, &rg) })
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
	default:
		r.ok = false
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
			switch key {
			case "containerID":
				a.ContainerID = r.str()
			case "ifname":
				a.IfName = r.str()
			default:
				r.ok = false
			}
		})
		out = append(out, a)
	})
	return out
}
