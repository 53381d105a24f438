package allocator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	hl "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
)

// corpusInput is one config of the loader corpus with its CNI_ARGS.
type corpusInput struct{ name, conf, cniArgs string }

// loaderCorpus is every config the loader tests run: LoadConfig's own accept
// and reject cases, the hand-written corner cases, and a generated corpus.
func loaderCorpus() []corpusInput {
	type input = corpusInput
	var corpus []input
	for _, c := range acceptCases {
		corpus = append(corpus, input{"accept/" + c.name, c.conf, c.cniArgs})
	}
	for _, c := range rejectCases {
		corpus = append(corpus, input{"reject/" + c.name, c.conf, c.cniArgs})
	}
	for i, c := range cornerCases {
		corpus = append(corpus, input{fmt.Sprintf("corner/%d", i), c[0], c[1]})
	}
	// HOSTLEASE_ORACLE_SEED and HOSTLEASE_ORACLE_N run another or a longer
	// generated corpus (e.g. a soak run before a release).
	seed, generated := uint64(20240611), 6000
	if v, err := strconv.ParseUint(os.Getenv("HOSTLEASE_ORACLE_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.Atoi(os.Getenv("HOSTLEASE_ORACLE_N")); err == nil && v > 0 {
		generated = v
	}
	g := &confGen{r: rand.New(rand.NewPCG(seed, 7))}
	for i := range generated {
		conf, args := g.config()
		corpus = append(corpus, input{fmt.Sprintf("generated/%d", i), conf, args})
	}
	return corpus
}

// TestLoadIPAMMatchesHostLocal is the oracle test for loadIPAM: for every
// config in the corpus (LoadConfig's own accept and reject cases, hand-written
// corners, and a few thousand generated configs), it runs host-local's
// allocator.LoadIPAMConfig and loadIPAM on the same stdin and CNI_ARGS and
// requires:
//
//   - both accept or both refuse;
//   - on accept: the same canonical range sets (subnet, rangeStart, rangeEnd,
//     gateway, in order), routes, resolvConf, requested IPs (in order, which
//     is stricter than as a set) and cniVersion;
//   - on refusal: the same error text.
//
// It also runs LoadConfig (when the hostlease-only fields are valid) and
// requires that its *types.Error message ends with host-local's message, i.e.
// differs only by the field-path prefix hostlease adds. (LoadConfig reports a
// malformed CNI_ARGS ahead of any other error; that is hostlease's own
// precedence, checked as such.)
//
// Documented differences, each checked exactly rather than skipped:
//
//  1. A null entry in args.cni.ips or runtimeConfig.ips makes host-local's
//     loader panic (nil *ip.IP). loadIPAM must refuse with errNullIP: a plugin
//     that crashes on DEL is retried forever.
//  2. For a JSON value of the wrong type, both return *json.UnmarshalTypeError;
//     its raw text names the decoder's Go types (host-local's
//     "IPAMArgs.args.cni.ips of type []*ip.IP" vs hostlease's own type names),
//     and host-local's JSON path includes its embedded Go struct
//     ("ipam.Range.subnet" for "ipam.subnet"). The test compares every other
//     part exactly: JSON path (with that one segment dropped), offending JSON
//     kind, byte offset, and the JSON kind expected; and the user-visible text
//     decodeError makes of each must be identical.
func TestLoadIPAMMatchesHostLocal(t *testing.T) {
	corpus := loaderCorpus()
	outcomes := map[string]int{}
	for _, in := range corpus {
		outcome := compareLoaders(t, in.name, []byte(in.conf), in.cniArgs)
		outcomes[outcome]++
	}

	// The corpus must exercise every path of host-local's loader, or
	// agreement proves little.
	var kinds []string
	for k, n := range outcomes {
		kinds = append(kinds, fmt.Sprintf("%6d  %s", n, k))
	}
	sort.Strings(kinds)
	t.Logf("%d configs compared; outcomes:\n%s", len(corpus), strings.Join(kinds, "\n"))
	for _, want := range []string{
		"accepted", "host-local panics",
		"json: cannot unmarshal", "invalid character", "invalid CIDR address", "invalid IP address",
		"ARGS: invalid pair", "ARGS: unknown args", "ARGS: error parsing value", "ARGS: cannot unmarshal into field",
		"cannot understand ip", "no IP ranges specified", "empty range set", "IP <nil> not v4 nor v6",
		"too small to allocate from", "IPNet IP and Mask version mismatch", "host bits set",
		"RangeStart", "RangeEnd", "mixed address families", "subnets", "overlaps with",
		"does not support more than", "IPAM config missing",
	} {
		n := 0
		for k, c := range outcomes {
			if strings.Contains(k, want) {
				n += c
			}
		}
		if n == 0 {
			t.Errorf("no config in the corpus reaches %q", want)
		}
	}
	if outcomes["accepted"] < len(corpus)/5 {
		t.Errorf("only %d configs accepted; the generator rejects too much to test canonicalization", outcomes["accepted"])
	}
}

// compareLoaders runs both loaders on one input, reports any disagreement, and
// returns a label for the outcome (host-local's message, shortened).
func compareLoaders(t *testing.T, name string, conf []byte, cniArgs string) string {
	t.Helper()
	fail := func(format string, a ...any) {
		t.Helper()
		t.Errorf("%s: conf %s CNI_ARGS %q: %s", name, conf, cniArgs, fmt.Sprintf(format, a...))
	}
	// LoadConfig decodes a config once (pluginConfJSON); it must load exactly
	// what decoding hostlease's and host-local's views separately loads.
	once, onceErr := LoadConfig(conf, cniArgs)
	apart, apartErr := loadConfigSeparately(conf, cniArgs)
	if fmt.Sprint(onceErr) != fmt.Sprint(apartErr) || !reflect.DeepEqual(once, apart) {
		fail("one decode: %+v, %v; two decodes: %+v, %v", once, onceErr, apart, apartErr)
	}
	ref, refVersion, refErr, refPanic := hostLocalLoad(conf, cniArgs)
	got, gotSets, gotVersion, err := loadIPAM(conf, cniArgs)
	checkLoadConfig(t, name, conf, cniArgs, ref, refVersion, refErr, refPanic)

	switch {
	case refPanic != nil:
		if !errors.Is(err, errNullIP) {
			fail("host-local panics (%v); loadIPAM returned %v, want errNullIP", refPanic, err)
		}
		return "host-local panics"
	case refErr != nil:
		if err == nil {
			fail("host-local refuses (%v), loadIPAM accepts", refErr)
			return label(refErr)
		}
		var refType, gotType *json.UnmarshalTypeError
		if errors.As(refErr, &refType) {
			if !errors.As(err, &gotType) {
				fail("host-local: %v; loadIPAM: %v (not a JSON type error)", refErr, err)
			} else if hostLocalField(refType.Field) != gotType.Field || refType.Value != gotType.Value ||
				refType.Offset != gotType.Offset || jsonKind(refType.Type) != jsonKind(gotType.Type) {
				fail("JSON type errors differ:\n host-local %+v\n loadIPAM   %+v", *refType, *gotType)
			}
			if a, b := decodeError(refErr).Error(), decodeError(err).Error(); a != b {
				fail("reported type errors differ:\n host-local %q\n loadIPAM   %q", a, b)
			}
			return "json: cannot unmarshal " + refType.Value
		}
		if refErr.Error() != err.Error() {
			fail("errors differ:\n host-local %q\n loadIPAM   %q", refErr, err)
		}
		return label(refErr)
	case err != nil:
		fail("host-local accepts, loadIPAM refuses: %v", err)
		return "accepted"
	}
	if want := storedFromHostLocal(ref.Ranges); !reflect.DeepEqual(gotSets, want) {
		fail("range sets differ:\n host-local %v\n loadIPAM   %v", want, gotSets)
	}
	if !reflect.DeepEqual(got.Routes, ref.Routes) {
		fail("routes differ: host-local %v, loadIPAM %v", ref.Routes, got.Routes)
	}
	if got.ResolvConf != ref.ResolvConf {
		fail("resolvConf: host-local %q, loadIPAM %q", ref.ResolvConf, got.ResolvConf)
	}
	if want := hostLocalAddrs(ref); !slices.Equal(got.Requested, want) {
		fail("requested IPs: host-local %v, loadIPAM %v", want, got.Requested)
	}
	if gotVersion != refVersion {
		fail("cniVersion: host-local %q, loadIPAM %q", refVersion, gotVersion)
	}
	return "accepted"
}

// checkLoadConfig requires LoadConfig to agree with host-local's loader up to
// the field path hostlease puts in front of the message. It applies when the
// config's hostlease-only parts are valid, so that the loader decides.
func checkLoadConfig(t *testing.T, name string, conf []byte, cniArgs string, ref *hl.IPAMConfig, refVersion string, refErr error, refPanic any) {
	t.Helper()
	var own ownConf
	if json.Unmarshal(conf, &own) != nil || validNetworkName(own.Name) != nil || own.IPAM == nil ||
		own.IPAM.LockTimeout != "" || own.IPAM.FailStatusOnExhaustion != nil {
		return
	}
	fail := func(format string, a ...any) {
		t.Helper()
		t.Errorf("%s: LoadConfig(conf %s, CNI_ARGS %q): %s", name, conf, cniArgs, fmt.Sprintf(format, a...))
	}
	c, err := LoadConfig(conf, cniArgs)
	if refErr == nil && refPanic == nil {
		if err != nil {
			fail("host-local accepts, LoadConfig refuses: %v", err)
			return
		}
		if want := storedFromHostLocal(ref.Ranges); !reflect.DeepEqual(c.RangeSets, want) {
			fail("RangeSets %v, host-local %v", c.RangeSets, want)
		}
		if want := hostLocalAddrs(ref); !slices.Equal(c.IPAM.Requested, want) {
			fail("Requested %v, host-local %v", c.IPAM.Requested, want)
		}
		if c.CNIVersion != refVersion || c.IPAM.ResolvConf != ref.ResolvConf || !reflect.DeepEqual(c.IPAM.Routes, ref.Routes) {
			fail("version/resolvConf/routes differ from host-local's")
		}
		return
	}
	var cerr *types.Error
	if err == nil {
		fail("host-local refuses (%v, panic %v), LoadConfig accepts", refErr, refPanic)
		return
	}
	if !errors.As(err, &cerr) {
		fail("error %v is not a *types.Error", err)
		return
	}
	// LoadConfig blames a malformed CNI_ARGS first, even where host-local's
	// loader stops earlier (at a JSON error): the words are LoadArgs's.
	var e envArgs
	if aerr := types.LoadArgs(cniArgs, &e); aerr != nil {
		if w := "CNI_ARGS: " + aerr.Error(); cerr.Msg != w || cerr.Code != types.ErrInvalidEnvironmentVariables {
			fail("code %d message %q, want code 4 %q", cerr.Code, cerr.Msg, w)
		}
		return
	}
	want := errNullIP.Error()
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case refPanic != nil:
	case errors.As(refErr, &syn), errors.As(refErr, &typ):
		if w := decodeError(refErr).Error(); cerr.Msg != w {
			fail("message %q, want %q", cerr.Msg, w)
		}
		return
	default:
		want = refErr.Error()
	}
	if !strings.HasSuffix(cerr.Msg, want) {
		fail("message %q does not end with host-local's %q", cerr.Msg, want)
	}
	if cerr.Code != types.ErrInvalidNetworkConfig && cerr.Code != types.ErrInvalidEnvironmentVariables {
		fail("code %d for %q", cerr.Code, cerr.Msg)
	}
}

// hostLocalLoad runs host-local's loader, turning a panic into a value.
func hostLocalLoad(conf []byte, cniArgs string) (c *hl.IPAMConfig, version string, err error, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			c, version, err, panicked = nil, "", nil, r
		}
	}()
	c, version, err = hl.LoadIPAMConfig(conf, cniArgs)
	return c, version, err, nil
}

// hostLocalField drops the Go struct host-local embeds the legacy range in.
func hostLocalField(f string) string { return strings.Replace(f, "ipam.Range.", "ipam.", 1) }

// label is an error message with its addresses, numbers and quoted values
// (any word holding a digit, a quote or a bracket) replaced, so that outcomes group by kind.
func label(err error) string {
	words := strings.Fields(err.Error())
	for i, w := range words {
		if strings.ContainsAny(w, "0123456789\"[") && w != "v4" && w != "v6" {
			words[i] = "_"
		}
	}
	return strings.Join(words, " ")
}

// storedFromHostLocal converts host-local's canonical ranges to the stored form.
func storedFromHostLocal(sets []hl.RangeSet) []StoredRangeSet {
	out := make([]StoredRangeSet, len(sets))
	for i, set := range sets {
		for _, r := range set {
			ones, _ := r.Subnet.Mask.Size()
			out[i].Ranges = append(out[i].Ranges, StoredRange{
				Subnet:  netip.PrefixFrom(fromIP(r.Subnet.IP), ones),
				Start:   fromIP(r.RangeStart),
				End:     fromIP(r.RangeEnd),
				Gateway: fromIP(r.Gateway),
			})
		}
	}
	return out
}

func hostLocalAddrs(c *hl.IPAMConfig) []netip.Addr {
	var out []netip.Addr
	for _, ip := range c.IPArgs {
		out = append(out, fromIP(ip))
	}
	return out
}

// cornerCases are {stdin, CNI_ARGS} pairs aimed at the loader's edges.
var cornerCases = func() [][2]string {
	wrap := func(ipam string) string {
		return `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"hostlease",` + ipam + `}}`
	}
	rs := func(ranges string) string { return wrap(`"ranges":` + ranges) }
	ok := rs(`[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/120"}]]`)
	c := [][2]string{
		// 4in6 subnets, addresses and requests.
		{rs(`[[{"subnet":"::ffff:10.0.0.0/104"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:10.0.0.0/120"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:10.0.0.0/127"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:10.0.0.1/128"}]]`), ""},
		{rs(`[[{"subnet":"::ffff:0:0/96"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"::ffff:10.0.0.9","rangeEnd":"::ffff:10.0.0.20","gateway":"::ffff:10.0.0.254"}]]`), ""},
		{rs(`[[{"subnet":"fd00::/120","rangeStart":"::ffff:10.0.0.9"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"fd00::1"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.5","rangeEnd":"fd00::1"}]]`), ""},
		{ok, "IP=::ffff:10.0.0.5"},
		{ok, "IP=10.0.0.5/24"},
		{ok, "IP=10.0.0.5/"},
		// Missing, null and empty values.
		{rs(`[[{"subnet":null}]]`), ""},
		{rs(`[[{"subnet":""}]]`), ""},
		{rs(`[[{}]]`), ""},
		{rs(`[[null]]`), ""},
		{rs(`[null]`), ""},
		{rs(`null`), ""},
		{rs(`[]`), ""},
		{wrap(`"rangeStart":"10.0.0.5","ranges":[[{"subnet":"10.1.0.0/24"}]]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","gateway":null,"rangeStart":"","rangeEnd":null`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","gateway":""}]]`), ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":null}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1"}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{}}`, ""},
		{`null`, ""},
		{`[]`, ""},
		{`{}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":null,"args":null}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":null}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":null}}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":5}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":5}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":[""]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":[""]}},"runtimeConfig":{"ips":[null]}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":["10.0.0.5/33"]}}}`, ""},
		{`{"cniVersion":"1.0.0","name":"net1","ipam":{"subnet":"10.0.0.0/24"},"args":{"cni":{"ips":[null]}}}`, "IP=x"},
		// Range bounds.
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.20","rangeEnd":"10.0.0.10"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.0"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.0","rangeEnd":"10.0.0.255"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.7","rangeEnd":"10.0.0.7"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/30"}],[{"subnet":"fd00::/126"}]]`), ""},
		{rs(`[[{"subnet":"0.0.0.0/0"}]]`), ""},
		{rs(`[[{"subnet":"255.255.255.252/30"}]]`), ""},
		{rs(`[[{"subnet":"::/0"}]]`), ""},
		{rs(`[[{"subnet":"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/8","rangeStart":"10.200.3.4","rangeEnd":"10.255.255.255"}]]`), ""},
		{rs(`[[{"subnet":"fd00:1::/64","rangeEnd":"fd00:1::ffff:ffff:ffff:ffff"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","gateway":"fd00::1"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","gateway":"192.168.1.1"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.1","rangeEnd":"10.0.0.100"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.1","rangeEnd":"10.0.0.100"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.100"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.100"}],[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.101"}]]`), ""},
		// A rangeStart past the default rangeEnd (the broadcast address) is
		// accepted; such a range overlaps one holding either of its ends.
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}],[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.194"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.194"}],[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"},{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.194"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.192/30","rangeStart":"10.0.0.195"}],[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.196"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/64"},{"subnet":"10.1.0.0/24"}]]`), ""},
		{rs(`[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"},{"subnet":"10.0.0.0/33"}]]`), ""},
		// Family counts and versions.
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/64"}]]}}`, ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"fd01::/64"}],[{"subnet":"fd00::/64"}]]}}`, ""},
		{`{"cniVersion":"0.1.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"cniVersion":"0.3.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"cniVersion":"abc","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`, ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/24"}]]}}`, ""},
		// JSON: key case, duplicates, types, and fatal errors after saved ones.
		{wrap(`"Subnet":"10.0.0.0/24","RANGESTART":"10.0.0.9"`), ""},
		{wrap(`"RANGES":[[{"SUBNET":"10.0.0.0/24","Gateway":"10.0.0.3"}]]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","subnet":"10.1.0.0/24"`), ""},
		{wrap(`"subnet":"10.0.0.0/24","subnet":"x"`), ""},
		{wrap(`"subnet":"10.0.0.0/24","name":5`), ""},
		{wrap(`"subnet":"10.0.0.0/24","Name":"x","IPArgs":["10.0.0.1"],"Range":5`), ""},
		{wrap(`"resolvConf":5,"subnet":"bad"`), ""},
		{wrap(`"resolvConf":5,"subnet":"10.0.0.0/24"`), ""},
		{wrap(`"subnet":"10.0.0.0/24","rangeStart":[1]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","rangeStart":{}`), ""},
		{wrap(`"subnet":["10.0.0.0/24"]`), ""},
		{wrap(`"subnet":{"ip":"10.0.0.0"}`), ""},
		{wrap(`"subnet":true`), ""},
		{wrap(`"ranges":[[{"subnet":"10.0.0.0/24","gateway":false}]],"type":7`), ""},
		{wrap(`"ranges":[{"subnet":"10.0.0.0/24"}]`), ""},
		{wrap(`"ranges":{"subnet":"10.0.0.0/24"}`), ""},
		// Routes.
		{wrap(`"subnet":"10.0.0.0/24","routes":[null]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[5]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{"dst":"10.0.0.0/8","mtu":"x"}]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{"dst":"10.0.0.0/8","gw":"x"}]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{"dst":"10.1.0.1/16","gw":"10.0.0.1","mtu":1400,"advmss":1300,"priority":5,"table":100,"scope":0}]`), ""},
		{wrap(`"subnet":"10.0.0.0/24","routes":[{}]`), ""},
		// CNI_ARGS.
		{ok, "CommonArgs=1"},
		{ok, "IgnoreUnknown=1;CommonArgs=1"},
		{ok, "IP=10.0.0.5;IP="},
		{ok, "IP=10.0.0.5;IP=10.0.0.6"},
		{ok, "IP="},
		{ok, "ip=10.0.0.5"},
		{ok, "IgnoreUnknown=1;IgnoreUnknown=0;X=1"},
		{ok, "IgnoreUnknown=True;X=1"},
		{ok, "IgnoreUnknown=false;X=1"},
		{ok, "K8S_POD_NAME=a=b"},
		{ok, ";"},
		{ok, "IgnoreUnknown=1;"},
		{ok, "IP=fd00::5;IgnoreUnknown=1;K8S_POD_NAMESPACE=x"},
		{ok, "IgnoreUnknown=1;IP=10.0.0.5;IgnoreUnknown=0"},
		{`not json`, "IP=x"},
	}
	return c
}()

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

// The plugin binary must not link host-local's packages: they pull in netlink
// and knftables, whose package init runs at every exec.
func TestPluginDoesNotImportHostLocal(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	for _, pkg := range []string{"../../cmd/ipam", "."} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, bad := range []string{"netlink", "knftables", "containernetworking/plugins/pkg/ip", "host-local"} {
				if strings.Contains(dep, bad) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
