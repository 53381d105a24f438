package netconf

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// The decoding types are the union of what hostlease reads and what host-local's
// loader (containernetworking/plugins v1.9.1, allocator.Net) reads, field for
// field. Where host-local decodes an address or CIDR, the field here decodes
// through host-local's own Go type (net.IP, types.IPNet, types.Route, and
// addrArg for plugins' ip.IP), so json.Unmarshal accepts, refuses and words
// errors exactly as in host-local; the wrapper only adds a failed flag, set
// on the value whose text did not parse. json.Unmarshal stops at that value,
// so the flag is set on exactly one value of a refused config, and its path
// names the field in the error (see failedField).
type (
	confJSON struct {
		Name          string                 `json:"name"`
		CNIVersion    string                 `json:"cniVersion"`
		Type          string                 `json:"type"`
		DataDir       string                 `json:"dataDir"`
		IPAM          *ipamJSON              `json:"ipam"`
		Valid         []allocator.Attachment `json:"cni.dev/valid-attachments"`
		ValidAltSpell []allocator.Attachment `json:"cni.dev/attachments"`
		RuntimeConfig runtimeConfJSON        `json:"runtimeConfig"`
		Args          *argsJSON              `json:"args"`
		// ipamNull is set when the config's "ipam" key holds null, which
		// json.Unmarshal decodes as it decodes a missing key (IPAM nil).
		ipamNull bool
		// unknown lists, sorted, the keys of the ipam object and of its
		// ranges' objects that no field decodes (not even ignoring case,
		// as json.Unmarshal matches): "ipam.rangeStrat",
		// "ipam.ranges[0][1].gatway". Accepted and ignored, as host-local
		// ignores them; nil when there are none.
		unknown []string
	}
	argsJSON struct {
		CNI *cniArgsJSON `json:"cni"`
	}
	cniArgsJSON struct {
		IPs []*addrArg `json:"ips"`
	}
	runtimeConfJSON struct {
		IPRanges []rangeSetJSON `json:"ipRanges"`
		IPs      []*addrArg     `json:"ips"`
	}
	ipamJSON struct {
		// The legacy single range sits directly in the ipam object.
		Subnet     cidrJSON `json:"subnet"`
		RangeStart *ipJSON  `json:"rangeStart"`
		RangeEnd   *ipJSON  `json:"rangeEnd"`
		Gateway    *ipJSON  `json:"gateway"`
		// host-local decodes an untagged Name field here, so a non-string
		// "name" inside ipam is a type error there; keep it one here.
		Name       string
		Type       string         `json:"type"`
		Routes     []*routeJSON   `json:"routes"`
		DataDir    string         `json:"dataDir"`
		ResolvConf string         `json:"resolvConf"`
		Ranges     []rangeSetJSON `json:"ranges"`
		// hostlease's own.
		LockTimeout            string `json:"lockTimeout"`
		FailStatusOnExhaustion *bool  `json:"failStatusOnExhaustion"`
	}
	rangeSetJSON []rangeJSON
	rangeJSON    struct {
		RangeStart *ipJSON  `json:"rangeStart"`
		RangeEnd   *ipJSON  `json:"rangeEnd"`
		Subnet     cidrJSON `json:"subnet"`
		Gateway    *ipJSON  `json:"gateway"`
	}
)

// ipJSON decodes a net.IP field with net.IP's UnmarshalText. Behind a pointer
// it decodes null as net.IP does (nil), and "" to an address-less value.
type ipJSON struct {
	ip     net.IP
	failed bool
}

func (a *ipJSON) UnmarshalText(text []byte) error {
	err := a.ip.UnmarshalText(text)
	a.failed = err != nil
	return err
}

// get is the decoded address, nil for none.
func (a *ipJSON) get() net.IP {
	if a == nil {
		return nil
	}
	return a.ip
}

// cidrJSON decodes a types.IPNet field with its UnmarshalJSON (which also
// runs for null, and refuses it).
type cidrJSON struct {
	n      types.IPNet
	failed bool
}

func (c *cidrJSON) UnmarshalJSON(data []byte) error {
	err := c.n.UnmarshalJSON(data)
	c.failed = err != nil
	return err
}

// routeJSON decodes a types.Route with its UnmarshalJSON.
type routeJSON struct {
	r types.Route
	// failed holds the address error that stopped decoding the route.
	failed *net.ParseError
}

func (rt *routeJSON) UnmarshalJSON(data []byte) error {
	err := rt.r.UnmarshalJSON(data)
	errors.As(err, &rt.failed)
	return err
}

// envArgs is what CNI_ARGS may carry. types.LoadArgs looks keys up by Go field
// name, so the fields (including the embedded CommonArgs' own name) are the
// same as host-local's.
type envArgs struct {
	types.CommonArgs
	IP addrArg
}

// addrArg is a requested address as plugins' ip.IP decodes it: "10.0.0.5" or
// "10.0.0.5/24" (the prefix length is ignored). Empty text leaves it unset.
type addrArg struct {
	addr   netip.Addr
	failed bool
}

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
		a.failed = true
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

// decode decodes a config: by the fast path when it takes the config (the
// common case, see decodeFast), else by json.Unmarshal. On error it also
// returns what json.Unmarshal decoded before it stopped, for failedField.
func decode(stdin []byte) (*confJSON, error) {
	if fastDecode {
		if p, ok := decodeFast(stdin); ok {
			return p, nil
		}
	}
	return decodeUnmarshal(stdin)
}

// decodeUnmarshal is decode by json.Unmarshal, with what it leaves out: a
// null ipam, the unknown ipam keys.
func decodeUnmarshal(stdin []byte) (*confJSON, error) {
	p := &confJSON{}
	if err := json.Unmarshal(stdin, p); err != nil {
		return p, err
	}
	p.ipamNull = p.IPAM == nil && hasTopLevelKey(stdin, "ipam")
	if p.IPAM != nil {
		p.unknown = unknownIPAMKeys(stdin)
	}
	return p, nil
}

// unknownIPAMKeys is confJSON.unknown for a config json.Unmarshal decoded:
// the keys of the ipam object and of its ranges' objects that match no
// field's name, ignoring case (the fields json.Unmarshal fills).
func unknownIPAMKeys(stdin []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(stdin, &top) != nil {
		return nil
	}
	var ipam map[string]json.RawMessage
	if json.Unmarshal(lookupFold(top, "ipam"), &ipam) != nil {
		return nil
	}
	unknown := unknownKeys(nil, "ipam", ipam, ipamFields)
	var sets [][]map[string]json.RawMessage
	if raw := lookupFold(ipam, "ranges"); raw != nil && json.Unmarshal(raw, &sets) == nil {
		for i, set := range sets {
			for j, rg := range set {
				unknown = unknownKeys(unknown, rangePath("ipam.ranges", i, j), rg, rangeFields)
			}
		}
	}
	slices.Sort(unknown)
	return unknown
}

// rangePath is the JSON path of range j of range set i under path.
func rangePath(path string, i, j int) string {
	return path + "[" + strconv.Itoa(i) + "][" + strconv.Itoa(j) + "]"
}

// unknownKeys appends to dst path.key for each key of obj matching none of
// fields, ignoring case.
func unknownKeys(dst []string, path string, obj map[string]json.RawMessage, fields []string) []string {
	for k := range obj {
		if !slices.ContainsFunc(fields, func(f string) bool { return strings.EqualFold(f, k) }) {
			dst = append(dst, path+"."+k)
		}
	}
	return dst
}

// lookupFold is obj's value under key as json.Unmarshal finds a field's:
// the exact key, else one equal ignoring case; nil when neither is there.
func lookupFold(obj map[string]json.RawMessage, key string) json.RawMessage {
	if v, ok := obj[key]; ok {
		return v
	}
	for k, v := range obj {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}

// explainDecodeError turns json.Unmarshal's error into a coded one: undecodable
// input or a value of the wrong JSON kind is code 6 (decoding failure), an
// address or CIDR that does not parse code 7 (invalid network config); both
// name the field. p is what was decoded before decoding stopped.
func explainDecodeError(p *confJSON, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return decodeError(err)
	}
	if field := p.failedField(); field != "" {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s: %v", field, err), "")
	}
	return decodeError(err)
}

// failedField is the JSON path of the value whose failed flag is set, or "".
func (p *confJSON) failedField() string {
	if p.IPAM != nil {
		if f := p.IPAM.rangeJSON().failedField("ipam"); f != "" {
			return f
		}
		if f := failedInSets("ipam.ranges", p.IPAM.Ranges); f != "" {
			return f
		}
		for i, rt := range p.IPAM.Routes {
			if rt != nil && rt.failed != nil {
				field := "gw"
				if rt.failed.Type == "CIDR address" {
					field = "dst"
				}
				return fmt.Sprintf("ipam.routes[%d].%s", i, field)
			}
		}
	}
	if f := failedInSets("runtimeConfig.ipRanges", p.RuntimeConfig.IPRanges); f != "" {
		return f
	}
	if f := failedAddr("runtimeConfig.ips", p.RuntimeConfig.IPs); f != "" {
		return f
	}
	if p.Args != nil && p.Args.CNI != nil {
		return failedAddr("args.cni.ips", p.Args.CNI.IPs)
	}
	return ""
}

// rangeJSON is the legacy range in the ipam object.
func (c *ipamJSON) rangeJSON() rangeJSON {
	return rangeJSON{Subnet: c.Subnet, RangeStart: c.RangeStart, RangeEnd: c.RangeEnd, Gateway: c.Gateway}
}

func (r rangeJSON) failedField(path string) string {
	switch {
	case r.Subnet.failed:
		return path + ".subnet"
	case r.RangeStart != nil && r.RangeStart.failed:
		return path + ".rangeStart"
	case r.RangeEnd != nil && r.RangeEnd.failed:
		return path + ".rangeEnd"
	case r.Gateway != nil && r.Gateway.failed:
		return path + ".gateway"
	}
	return ""
}

func failedInSets(path string, sets []rangeSetJSON) string {
	for i, set := range sets {
		for j := range set {
			if f := set[j].failedField(fmt.Sprintf("%s[%d][%d]", path, i, j)); f != "" {
				return f
			}
		}
	}
	return ""
}

func failedAddr(path string, addrs []*addrArg) string {
	for i, a := range addrs {
		if a != nil && a.failed {
			return fmt.Sprintf("%s[%d]", path, i)
		}
	}
	return ""
}

// decodeError classifies a JSON decoding failure: undecodable input or a field
// of the wrong type is code 6 (failed to decode content), naming the field.
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("config is not valid JSON at byte %d: %v", syn.Offset, err), "")
	case errors.As(err, &typ):
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: expected %s, got JSON %s", typ.Field, jsonKind(typ.Type), typ.Value), "")
	}
	return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("config: %v", err), "")
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// jsonKind names the JSON kind a Go type decodes from ("string", "array", ...),
// so that a type error reads the same whichever Go types the decoder used.
func jsonKind(t reflect.Type) string {
	for t != nil {
		if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return "string"
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
			continue
		case reflect.String:
			return "string"
		case reflect.Bool:
			return "boolean"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
			reflect.Float32, reflect.Float64:
			return "number"
		case reflect.Slice, reflect.Array:
			return "array"
		case reflect.Struct, reflect.Map:
			return "object"
		}
		return t.String()
	}
	return "a value"
}
