package netconf

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"strings"
)

// confGen generates network configs around a few nearby subnets, so that
// overlaps, bounds outside the subnet and family mixes are common, with a
// little malformed input of every kind.
type confGen struct {
	r *rand.Rand
	// clean configs (half of them) hold no malformed or undersized value,
	// so that a good share is accepted and canonicalization is compared.
	clean bool
}

func (g *confGen) p(prob float64) bool { return g.r.Float64() < prob }

// junk is p(prob), but never in a clean config.
func (g *confGen) junk(prob float64) bool { return !g.clean && g.p(prob) }

func (g *confGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

// prefix returns a subnet (usually without host bits) of the given family.
func (g *confGen) prefix(v6 bool) netip.Prefix {
	var base netip.Addr
	var bits int
	if v6 {
		bits = []int{64, 96, 112, 112, 120, 120, 120, 124, 124, 125, 126, 126, 127, 128}[g.r.IntN(14)]
		if g.clean {
			bits = min(bits, 126)
		}
		b := netip.MustParseAddr("fd00::").As16()
		b[14], b[15] = byte(g.r.IntN(4)), byte(g.r.IntN(256))
		base = netip.AddrFrom16(b)
	} else {
		bits = []int{8, 16, 22, 24, 24, 24, 25, 26, 26, 28, 28, 29, 30, 30, 31, 32}[g.r.IntN(16)]
		if g.clean {
			bits = min(bits, 30)
		}
		base = netip.AddrFrom4([4]byte{10, 0, byte(g.r.IntN(4)), byte(g.r.IntN(256))})
	}
	p := netip.PrefixFrom(base, bits)
	if !g.junk(0.04) {
		p = p.Masked()
	}
	return p
}

// addrIn returns an address in p, or now and then outside it.
func (g *confGen) addrIn(p netip.Prefix) string {
	host := p.Addr().BitLen() - p.Bits()
	a := p.Masked().Addr()
	n := 1 << min(host, 12)
	if g.junk(0.1) {
		n *= 4 // often past the subnet's end
	}
	for range g.r.IntN(n) {
		if next := a.Next(); next.IsValid() {
			a = next
		}
	}
	switch {
	case g.p(0.04) && a.Is4():
		return "::ffff:" + a.String()
	case g.junk(0.03):
		return g.prefix(a.Is4()).Addr().String() // the other family
	}
	return a.String()
}

// value is v, or now and then something of the wrong JSON type.
func (g *confGen) value(v any) any {
	if !g.junk(0.008) {
		return v
	}
	return []any{5, true, nil, map[string]any{}, []any{"10.0.0.1"}, "", "10.0.0", "x/24"}[g.r.IntN(8)]
}

// key is k, or now and then k in another case (JSON keys match either way).
func (g *confGen) key(k string) string {
	if g.p(0.03) {
		return strings.ToUpper(k)
	}
	return k
}

type member struct {
	k string
	v any
}

// object is a JSON object that keeps its members' order.
type object []member

func (o object) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.k)
		v, err := json.Marshal(m.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func (g *confGen) shuffle(o object) object {
	g.r.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// rangeObj returns one range of the family and the subnet it was built on.
func (g *confGen) rangeObj(v6 bool) (object, netip.Prefix) {
	p := g.prefix(v6)
	var o object
	switch {
	case g.junk(0.02):
	case g.junk(0.02):
		o = append(o, member{g.key("subnet"), g.pick("", "10.0.0.0/33", "10.0.0.1", "fd00::/129", "x")})
	default:
		o = append(o, member{g.key("subnet"), g.value(p.String())})
	}
	for _, k := range []string{"rangeStart", "rangeEnd", "gateway"} {
		if g.p(0.25) {
			o = append(o, member{g.key(k), g.value(g.addrIn(p))})
		}
	}
	return g.shuffle(o), p
}

// rangeSets returns 1-3 range sets; those after the first usually change family.
func (g *confGen) rangeSets(subnets *[]netip.Prefix) []any {
	var sets []any
	v6 := g.p(0.4)
	for range g.r.IntN(3) + 1 {
		var set []any
		n := 1 + g.r.IntN(2)
		if g.junk(0.15) {
			n = 3
		}
		if g.junk(0.02) {
			n = 0
		}
		for range n {
			fam := v6
			if g.junk(0.05) {
				fam = !fam
			}
			r, p := g.rangeObj(fam)
			set = append(set, g.value(r))
			*subnets = append(*subnets, p)
		}
		sets = append(sets, g.value(set))
		if g.p(0.7) {
			v6 = !v6
		}
	}
	return sets
}

func (g *confGen) ips(subnets []netip.Prefix) []any {
	var out []any
	for range g.r.IntN(3) {
		var s string
		if len(subnets) > 0 {
			s = g.addrIn(subnets[g.r.IntN(len(subnets))])
		} else {
			s = "10.0.0.9"
		}
		if g.p(0.2) {
			s += "/24"
		}
		switch {
		case g.junk(0.02):
			out = append(out, nil)
		case g.junk(0.02):
			out = append(out, g.pick("", "x", "10.0.0.1/", "10.0.0.256"))
		default:
			out = append(out, g.value(s))
		}
	}
	return out
}

func (g *confGen) config() (string, string) {
	g.clean = g.p(0.5)
	var subnets []netip.Prefix
	ipam := object{{"type", "hostlease"}}
	if g.p(0.3) {
		r, p := g.rangeObj(g.p(0.3))
		ipam = append(ipam, r...)
		subnets = append(subnets, p)
	}
	if !g.junk(0.15) {
		ipam = append(ipam, member{g.key("ranges"), g.value(g.rangeSets(&subnets))})
	}
	if g.p(0.2) {
		ipam = append(ipam, member{"routes", g.value([]any{
			object{{"dst", g.value(g.prefix(false).Masked().String())}, {"gw", g.value("10.0.0.1")}},
			object{{"dst", "::/0"}, {"mtu", g.value(1400)}},
		})})
	}
	if g.p(0.2) {
		ipam = append(ipam, member{"resolvConf", g.value("/etc/resolv.conf")})
	}
	if g.p(0.1) {
		ipam = append(ipam, member{"dataDir", "/run/hostlease-test"})
	}
	conf := object{
		{"cniVersion", g.value(g.pick("1.0.0", "1.0.0", "0.4.0", "0.3.1", "0.3.0", "0.2.0", "0.1.0", "", "abc"))},
		{"name", "net1"},
		{"type", "bridge"},
		{"ipam", g.value(g.shuffle(ipam))},
	}
	if g.p(0.2) {
		var rc object
		if g.p(0.6) {
			rc = append(rc, member{"ipRanges", g.value(g.rangeSets(&subnets))})
		}
		if g.p(0.6) {
			rc = append(rc, member{"ips", g.value(g.ips(subnets))})
		}
		conf = append(conf, member{"runtimeConfig", g.value(g.shuffle(rc))})
	}
	if g.p(0.15) {
		conf = append(conf, member{"args", g.value(object{{"cni", g.value(object{{"ips", g.value(g.ips(subnets))}})}})})
	}
	b, err := json.Marshal(g.shuffle(conf))
	if err != nil {
		panic(err)
	}
	s := string(b)
	if g.junk(0.01) {
		s = s[:g.r.IntN(len(s))] // truncated
	}
	var args string
	if g.p(0.3) {
		ip := "10.0.0.7"
		if len(subnets) > 0 {
			ip = g.addrIn(subnets[0])
		}
		args = g.pick("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;IP="+ip,
			"IP="+ip, "IgnoreUnknown=1;K8S_POD_NAME=x", "IP="+ip)
	}
	if g.junk(0.3) {
		ip := "10.0.0.7"
		if len(subnets) > 0 {
			ip = g.addrIn(subnets[0])
		}
		args = g.pick("IP="+ip, "IP="+ip+"/24", "IP=", "IP=x", "FOO=bar", "IgnoreUnknown=true;FOO=bar",
			"IgnoreUnknown=0;FOO=bar", "K8S_POD_NAME", "IgnoreUnknown=maybe", "CommonArgs=1", "IP="+ip+";IP=10.0.0.300")
	}
	return s, args
}
