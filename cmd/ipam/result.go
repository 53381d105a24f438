package main

import (
	"bytes"
	"encoding/json"
	"os"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// printResult prints an ADD result exactly as types.PrintResult does.
//
// For the result an IPAM ADD returns at CNI 1.0.0 or 1.1.0 it writes the
// bytes itself: types.PrintResult marshals the result, decodes it into a map
// (to drop an empty "dns") and marshals that again, all through reflection
// whose per-type caches every exec builds from nothing. make bench measures
// the gain against the same code built with -tags nofastencode
// (docs/benchmarks.md, "Fast paths").
// Anything else (older versions, interfaces, rarer route fields) goes to
// types.PrintResult. TestPrintResultMatchesCNI compares the two,
// TestEncoderKnowsEveryResultField pins every field of the CNI result types
// to what the encoder does with it, and test/differential compares an ADD's
// bytes with host-local's.
func printResult(r *current.Result, cniVersion string) error {
	if fastEncode {
		if b, ok := encodeResult(r, cniVersion); ok {
			_, err := os.Stdout.Write(b)
			return err
		}
	}
	return types.PrintResult(r, cniVersion)
}

// encodeResult is what printResult writes, or false where it defers to
// types.PrintResult. The output is types100.Result's: a JSON object with its
// keys in sorted order (it passes through a map), indented by four spaces.
func encodeResult(r *current.Result, cniVersion string) ([]byte, bool) {
	if cniVersion != "1.0.0" && cniVersion != current.ImplementedSpecVersion || len(r.Interfaces) > 0 {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteString(`{"cniVersion":`)
	writeString(&b, cniVersion)
	if d := r.DNS; !d.IsEmpty() {
		b.WriteString(`,"dns":{`)
		sep := ""
		if d.Domain != "" {
			b.WriteString(`"domain":`)
			writeString(&b, d.Domain)
			sep = ","
		}
		for _, l := range []struct {
			key  string
			vals []string
		}{{"nameservers", d.Nameservers}, {"options", d.Options}, {"search", d.Search}} {
			if len(l.vals) == 0 {
				continue
			}
			b.WriteString(sep + `"` + l.key + `":[`)
			for i, v := range l.vals {
				if i > 0 {
					b.WriteByte(',')
				}
				writeString(&b, v)
			}
			b.WriteByte(']')
			sep = ","
		}
		b.WriteByte('}')
	}
	if len(r.IPs) > 0 {
		b.WriteString(`,"ips":[`)
		for i, ip := range r.IPs {
			if ip == nil || ip.Interface != nil {
				return nil, false
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"address":`)
			writeString(&b, ip.Address.String())
			if len(ip.Gateway) > 0 {
				b.WriteString(`,"gateway":`)
				writeString(&b, ip.Gateway.String())
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	if len(r.Routes) > 0 {
		b.WriteString(`,"routes":[`)
		for i, rt := range r.Routes {
			if rt == nil || rt.MTU != 0 || rt.AdvMSS != 0 || rt.Priority != 0 || rt.Table != nil || rt.Scope != nil {
				return nil, false
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"dst":`)
			writeString(&b, rt.Dst.String())
			if len(rt.GW) > 0 {
				b.WriteString(`,"gw":`)
				writeString(&b, rt.GW.String())
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "    "); err != nil {
		return nil, false
	}
	return out.Bytes(), true
}

// writeString writes s as encoding/json does (HTML-safe escaping included).
func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string never fails to marshal
	b.Write(q)
}
