package main

import (
	"bytes"
	"net"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// What encodeResult does with a field of the upstream result types.
const (
	writes = "writes" // the encoder emits the field itself
	defers = "defers" // a non-zero value sends the result to types.PrintResult
)

// encoderFields pins every field of the CNI result types an ADD result can
// carry (current.Result and the structs reachable from it, except through a
// deferred field) to what encodeResult does with it. A field the CNI library
// adds is in neither list: TestEncoderKnowsEveryResultField fails until it is
// classified, so a new field cannot be dropped silently from the bytes the
// fast path writes.
var encoderFields = map[reflect.Type]map[string]string{
	reflect.TypeOf(current.Result{}): {
		"CNIVersion": writes, // from the version asked, as types.PrintResult does
		"Interfaces": defers,
		"IPs":        writes,
		"Routes":     writes,
		"DNS":        writes,
	},
	reflect.TypeOf(current.IPConfig{}): {
		"Interface": defers,
		"Address":   writes,
		"Gateway":   writes,
	},
	reflect.TypeOf(types.Route{}): {
		"Dst":      writes,
		"GW":       writes,
		"MTU":      defers,
		"AdvMSS":   defers,
		"Priority": defers,
		"Table":    defers,
		"Scope":    defers,
	},
	reflect.TypeOf(types.DNS{}): {
		"Nameservers": writes,
		"Domain":      writes,
		"Search":      writes,
		"Options":     writes,
	},
}

// cniStructs lists the struct types of the CNI module reachable from t's
// fields, t included, without descending into deferred fields.
func cniStructs(t reflect.Type, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || !strings.HasPrefix(t.PkgPath(), "github.com/containernetworking/cni/") || seen[t] {
		return
	}
	seen[t] = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.IsExported() && encoderFields[t][f.Name] != defers {
			cniStructs(f.Type, seen)
		}
	}
}

// TestEncoderKnowsEveryResultField: the fields of the CNI library's result
// types are exactly the ones encoderFields classifies.
func TestEncoderKnowsEveryResultField(t *testing.T) {
	seen := map[reflect.Type]bool{}
	cniStructs(reflect.TypeOf(current.Result{}), seen)
	for typ := range seen {
		known, ok := encoderFields[typ]
		if !ok {
			t.Errorf("%v: a result type encodeResult does not know; classify its fields in encoderFields", typ)
			continue
		}
		var have []string
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			have = append(have, f.Name)
			if _, ok := known[f.Name]; !ok {
				t.Errorf("%v.%s: a field encodeResult does not know (added upstream?); write it in encodeResult or defer on it", typ, f.Name)
			}
		}
		for name := range known {
			if _, ok := typ.FieldByName(name); !ok {
				t.Errorf("%v.%s is classified but no longer exists (fields: %v)", typ, name, have)
			}
		}
	}
	for typ := range encoderFields {
		if !seen[typ] {
			t.Errorf("%v is classified but no longer reachable from current.Result", typ)
		}
	}
}

// TestEncoderFieldClassification: for every classified field, a result with
// that field set to a non-zero value is either encoded to exactly
// types.PrintResult's bytes (writes) or left to types.PrintResult (defers).
func TestEncoderFieldClassification(t *testing.T) {
	typs := make([]reflect.Type, 0, len(encoderFields))
	for typ := range encoderFields {
		typs = append(typs, typ)
	}
	sort.Slice(typs, func(i, j int) bool { return typs[i].String() < typs[j].String() })
	for _, typ := range typs {
		names := make([]string, 0, len(encoderFields[typ]))
		for name := range encoderFields[typ] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			want := encoderFields[typ][name]
			versions := []string{"1.0.0", current.ImplementedSpecVersion}
			for i, version := range versions {
				r := sampleResult()
				f := resultHolder(t, r, typ).FieldByName(name)
				f.Set(nonZero(t, f.Type()))
				if name == "CNIVersion" {
					// The version a result converts from must be one
					// the library knows: the other one of the pair.
					r.CNIVersion = versions[1-i]
				}
				got, ok := encodeResult(r, version)
				switch {
				case want == defers && ok:
					t.Errorf("%v.%s set at %s: encoded it itself, want it left to types.PrintResult", typ, name, version)
				case want == writes && !ok:
					t.Errorf("%v.%s set at %s: deferred, want it written", typ, name, version)
				case want == writes:
					if cni := cniPrint(t, r, version); !bytes.Equal(got, cni) {
						t.Errorf("%v.%s set at %s:\n got %s\nwant %s", typ, name, version, got, cni)
					}
				}
			}
		}
	}
}

// sampleResult is an ADD result with one of each struct encoderFields names.
func sampleResult() *current.Result {
	return &current.Result{
		IPs:    []*current.IPConfig{{Address: cidr("10.0.0.9/24"), Gateway: net.ParseIP("10.0.0.1").To4()}},
		Routes: []*types.Route{{Dst: cidr("0.0.0.0/0")}},
		DNS:    types.DNS{Nameservers: []string{"10.96.0.10"}},
	}
}

// resultHolder is the struct of type typ inside r that sampleResult made.
func resultHolder(t *testing.T, r *current.Result, typ reflect.Type) reflect.Value {
	t.Helper()
	switch typ {
	case reflect.TypeOf(current.Result{}):
		return reflect.ValueOf(r).Elem()
	case reflect.TypeOf(current.IPConfig{}):
		return reflect.ValueOf(r.IPs[0]).Elem()
	case reflect.TypeOf(types.Route{}):
		return reflect.ValueOf(r.Routes[0]).Elem()
	case reflect.TypeOf(types.DNS{}):
		return reflect.ValueOf(&r.DNS).Elem()
	}
	t.Fatalf("no %v in the sample result; add one to sampleResult and resultHolder", typ)
	return reflect.Value{}
}

// nonZero is a value of type typ that is not its zero value.
func nonZero(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	switch typ {
	case reflect.TypeOf(net.IPNet{}):
		return reflect.ValueOf(cidr("192.168.7.0/24"))
	case reflect.TypeOf(net.IP{}):
		return reflect.ValueOf(net.ParseIP("10.0.0.77").To4())
	}
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
		v.Elem().Set(nonZero(t, typ.Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(typ, 1, 1))
		v.Index(0).Set(nonZero(t, typ.Elem()))
	case reflect.Struct:
		// A classified struct gets only the fields the encoder writes:
		// each deferred one is tried on its own.
		for i := 0; i < typ.NumField(); i++ {
			if typ.Field(i).IsExported() && encoderFields[typ][typ.Field(i).Name] != defers {
				v.Field(i).Set(nonZero(t, typ.Field(i).Type))
			}
		}
	default:
		t.Fatalf("no non-zero value for %v: extend nonZero", typ)
	}
	return v
}
