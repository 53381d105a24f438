package netconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	hl "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// TestLoaderMatchesHostLocal is the oracle test for decode and ipamFrom: for
// every config in the corpus (Load's own accept and reject cases, hand-written
// corners, and a few thousand generated configs), it runs host-local's
// allocator.LoadIPAMConfig and decode+ipamFrom (loadIPAM below) on the same
// stdin and CNI_ARGS and requires:
//
//   - both accept or both refuse;
//   - on accept: the same canonical range sets (subnet, rangeStart, rangeEnd,
//     gateway, in order), routes, resolvConf, requested IPs (in order, which
//     is stricter than as a set) and cniVersion;
//   - on refusal: the same error text.
//
// It also runs Load and requires that its *types.Error message ends with
// host-local's message, i.e. differs only by the field-path prefix hostlease
// adds. (Load reports a malformed CNI_ARGS ahead of any other error; that is
// hostlease's own precedence, checked as such.) Both comparisons apply when
// the fields only hostlease reads (top-level type and dataDir, GC's
// attachments, ipam.lockTimeout and ipam.failStatusOnExhaustion) decode and,
// for Load, hold their defaults: host-local ignores them, hostlease refuses
// them when they are wrong (TestLoadRejects checks those errors).
//
// Documented differences, each checked exactly rather than skipped:
//
//  1. A null entry in args.cni.ips or runtimeConfig.ips makes host-local's
//     loader panic (nil *ip.IP). ipamFrom must refuse with errNullIP: a plugin
//     that crashes on DEL is retried forever.
//  2. For a JSON value of the wrong type, both return *json.UnmarshalTypeError;
//     its raw text names the decoder's Go types (host-local's
//     "IPAMArgs.args.cni.ips of type []*ip.IP" vs hostlease's own type names),
//     and host-local's JSON path includes its embedded Go struct
//     ("ipam.Range.subnet" for "ipam.subnet"). The test compares every other
//     part exactly: JSON path (with that one segment dropped), offending JSON
//     kind, byte offset, and the JSON kind expected; and the user-visible text
//     decodeError makes of each must be identical.
//  3. An unordered pair (rangeStart after rangeEnd, both in the subnet) is
//     "RangeStart X not in network N" to both loaders; Load's message names
//     the pair instead ("rangeStart X is after rangeEnd Y"), in place of
//     those words.
func TestLoaderMatchesHostLocal(t *testing.T) {
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
	if n := outcomes[ownFieldRefused]; n > 20 {
		t.Errorf("%d configs not compared (%s); the corpus is meant for host-local's fields", n, ownFieldRefused)
	}
}

// FuzzLoaderMatchesHostLocal is TestLoaderMatchesHostLocal's comparison on
// any input (without CNI_ARGS).
func FuzzLoaderMatchesHostLocal(f *testing.F) {
	for _, c := range fastPathCases {
		f.Add([]byte(c))
	}
	for _, c := range acceptCases {
		f.Add([]byte(c.conf))
	}
	f.Fuzz(func(t *testing.T, conf []byte) {
		compareLoaders(t, "fuzz", conf, "")
	})
}

// ownFields holds the fields only hostlease reads, as Load decodes them.
type ownFields struct {
	Name          json.RawMessage        `json:"name"`
	Type          string                 `json:"type"`
	DataDir       string                 `json:"dataDir"`
	Valid         []allocator.Attachment `json:"cni.dev/valid-attachments"`
	ValidAltSpell []allocator.Attachment `json:"cni.dev/attachments"`
	IPAM          json.RawMessage        `json:"ipam"`
	ipam          struct {
		LockTimeout            string `json:"lockTimeout"`
		FailStatusOnExhaustion *bool  `json:"failStatusOnExhaustion"`
	}
	ipamIsObject bool
}

// decodeOwnFields decodes conf's fields that only hostlease reads, and reports
// whether they decode (which they do when conf is not a JSON object at all).
func decodeOwnFields(conf []byte) (own ownFields, ok bool) {
	var top, ipam map[string]json.RawMessage
	if json.Unmarshal(conf, &top) != nil {
		return own, true
	}
	if json.Unmarshal(conf, &own) != nil {
		return own, false
	}
	if own.ipamIsObject = json.Unmarshal(own.IPAM, &ipam) == nil && ipam != nil; !own.ipamIsObject {
		return own, true
	}
	return own, json.Unmarshal(own.IPAM, &own.ipam) == nil
}

const ownFieldRefused = "not compared: a field only hostlease reads does not decode"

// loadIPAM is what Load does with the parts of a config host-local reads:
// decode, then ipamFrom, with the raw errors host-local's loader would return.
func loadIPAM(conf []byte, cniArgs string) (*IPAM, []allocator.StoredRangeSet, string, error) {
	p, err := decode(conf)
	if err != nil {
		return nil, nil, "", err
	}
	ipam, sets, err := ipamFrom(p, cniArgs)
	return ipam, sets, p.CNIVersion, err
}

// compareLoaders runs both loaders on one input, reports any disagreement, and
// returns a label for the outcome (host-local's message, shortened).
func compareLoaders(t *testing.T, name string, conf []byte, cniArgs string) string {
	t.Helper()
	fail := func(format string, a ...any) {
		t.Helper()
		t.Errorf("%s: conf %s CNI_ARGS %q: %s", name, conf, cniArgs, fmt.Sprintf(format, a...))
	}
	own, ok := decodeOwnFields(conf)
	if !ok {
		return ownFieldRefused
	}
	ref, refVersion, refErr, refPanic := hostLocalLoad(conf, cniArgs)
	got, gotSets, gotVersion, err := loadIPAM(conf, cniArgs)
	checkLoad(t, name, conf, cniArgs, own, ref, refVersion, refErr, refPanic)

	switch {
	case refPanic != nil:
		if fe, ok := err.(*fieldError); !ok || fe.err != errNullIP {
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
			} else if refType.Field != gotType.Field || refType.Value != gotType.Value ||
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

// checkLoad requires Load to agree with host-local's loader up to the field
// path hostlease puts in front of the message. It applies when the config's
// hostlease-only parts hold their defaults, so that the loader decides.
func checkLoad(t *testing.T, name string, conf []byte, cniArgs string, own ownFields, ref *hl.IPAMConfig, refVersion string, refErr error, refPanic any) {
	t.Helper()
	var network string
	if json.Unmarshal(own.Name, &network) != nil || !allocator.ValidNetworkName(network) || !own.ipamIsObject ||
		own.ipam.LockTimeout != "" || own.ipam.FailStatusOnExhaustion != nil {
		return
	}
	fail := func(format string, a ...any) {
		t.Helper()
		t.Errorf("%s: Load(conf %s, CNI_ARGS %q): %s", name, conf, cniArgs, fmt.Sprintf(format, a...))
	}
	c, err := Load(conf, cniArgs)
	if refErr == nil && refPanic == nil {
		if err != nil {
			fail("host-local accepts, Load refuses: %v", err)
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
		fail("host-local refuses (%v, panic %v), Load accepts", refErr, refPanic)
		return
	}
	if !errors.As(err, &cerr) {
		fail("error %v is not a *types.Error", err)
		return
	}
	// Load blames a malformed CNI_ARGS first, even where host-local's
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
	// 3. An unordered pair (rangeStart after rangeEnd, both in the subnet)
	// is "RangeStart ... not in network" to host-local (ipamFrom keeps
	// those words); Load names the pair instead.
	var oe *rangeOrderError
	if _, _, _, ierr := loadIPAM(conf, cniArgs); errors.As(ierr, &oe) {
		want = strings.Replace(want, oe.Error(), oe.explain(), 1)
	}
	if !strings.HasSuffix(cerr.Msg, want) {
		fail("message %q does not end with host-local's %q", cerr.Msg, want)
	}
	if cerr.Code != types.ErrInvalidNetworkConfig && cerr.Code != types.ErrInvalidEnvironmentVariables {
		fail("code %d for %q", cerr.Code, cerr.Msg)
	}
}

// hostLocalLoad runs host-local's loader, turning a panic into a value.
// A JSON type error's path loses the Go struct host-local embeds the legacy
// range in ("ipam.Range.subnet" is the JSON path "ipam.subnet").
func hostLocalLoad(conf []byte, cniArgs string) (c *hl.IPAMConfig, version string, err error, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			c, version, err, panicked = nil, "", nil, r
		}
	}()
	c, version, err = hl.LoadIPAMConfig(conf, cniArgs)
	if typ := (*json.UnmarshalTypeError)(nil); errors.As(err, &typ) {
		typ.Field = strings.Replace(typ.Field, "ipam.Range.", "ipam.", 1)
	}
	return c, version, err, nil
}

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
func storedFromHostLocal(sets []hl.RangeSet) []allocator.StoredRangeSet {
	out := make([]allocator.StoredRangeSet, len(sets))
	for i, set := range sets {
		for _, r := range set {
			ones, _ := r.Subnet.Mask.Size()
			out[i].Ranges = append(out[i].Ranges, allocator.StoredRange{
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

// The plugin binary must not link host-local's packages: they pull in netlink
// and knftables, whose package init runs at every exec.
func TestPluginDoesNotImportHostLocal(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	for _, pkg := range []string{"../../../cmd/ipam", "."} {
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
