package allocator

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// decodeError classifies a JSON decoding failure: undecodable input or a field
// of the wrong type is code 6 (failed to decode content), naming the field.
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("config is not valid JSON at byte %d: %v", syn.Offset, err), "")
	case errors.As(err, &typ):
		// host-local embeds the legacy top-level range as a Go struct named
		// Range; its fields sit directly in the ipam object.
		field := strings.Replace(typ.Field, "ipam.Range.", "ipam.", 1)
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: expected %s, got JSON %s", field, jsonKind(typ.Type), typ.Value), "")
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

// explainIPAMError turns an error from loadIPAM (host-local's wording) into a coded
// error. It runs only on the failure path, so it may re-read the config to find
// which field holds the bad value.
func explainIPAMError(stdin []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return decodeError(err)
	}
	msg := err.Error()
	if field := findBadAddressField(stdin); field != "" {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s: %s", field, msg), "")
	}
	switch {
	case strings.HasPrefix(msg, "invalid range set"), strings.HasPrefix(msg, "range set"), strings.HasPrefix(msg, "no IP ranges"):
		msg = "ipam.ranges: " + msg
	case strings.HasPrefix(msg, "cannot understand ip"):
		return types.NewError(types.ErrInvalidEnvironmentVariables, "requested IPs (CNI_ARGS IP, args.cni.ips, runtimeConfig.ips): "+msg, "")
	}
	return types.NewError(types.ErrInvalidNetworkConfig, msg, "")
}

// findBadAddressField returns the JSON path of the first address or CIDR field
// that does not parse, or "".
func findBadAddressField(stdin []byte) string {
	var doc struct {
		IPAM          map[string]json.RawMessage `json:"ipam"`
		RuntimeConfig struct {
			IPRanges []json.RawMessage `json:"ipRanges"`
			IPs      []json.RawMessage `json:"ips"`
		} `json:"runtimeConfig"`
		Args struct {
			CNI struct {
				IPs []json.RawMessage `json:"ips"`
			} `json:"cni"`
		} `json:"args"`
	}
	if json.Unmarshal(stdin, &doc) != nil {
		return ""
	}
	if f := badRange("ipam", doc.IPAM); f != "" {
		return f
	}
	var sets [][]map[string]json.RawMessage
	if raw, ok := doc.IPAM["ranges"]; ok && json.Unmarshal(raw, &sets) == nil {
		for i, set := range sets {
			for j, r := range set {
				if f := badRange(fmt.Sprintf("ipam.ranges[%d][%d]", i, j), r); f != "" {
					return f
				}
			}
		}
	}
	var routes []map[string]json.RawMessage
	if raw, ok := doc.IPAM["routes"]; ok && json.Unmarshal(raw, &routes) == nil {
		for i, r := range routes {
			if raw, ok := r["dst"]; ok && !parsesAs(raw, cidrOnly) {
				return fmt.Sprintf("ipam.routes[%d].dst", i)
			}
			if raw, ok := r["gw"]; ok && !parsesAs(raw, addrOnly) {
				return fmt.Sprintf("ipam.routes[%d].gw", i)
			}
		}
	}
	for i, raw := range doc.RuntimeConfig.IPRanges {
		var set []map[string]json.RawMessage
		if json.Unmarshal(raw, &set) == nil {
			for j, r := range set {
				if f := badRange(fmt.Sprintf("runtimeConfig.ipRanges[%d][%d]", i, j), r); f != "" {
					return f
				}
			}
		}
	}
	for i, raw := range doc.RuntimeConfig.IPs {
		if !parsesAs(raw, addrOrCIDR) {
			return fmt.Sprintf("runtimeConfig.ips[%d]", i)
		}
	}
	for i, raw := range doc.Args.CNI.IPs {
		if !parsesAs(raw, addrOrCIDR) {
			return fmt.Sprintf("args.cni.ips[%d]", i)
		}
	}
	return ""
}

func badRange(path string, r map[string]json.RawMessage) string {
	if raw, ok := r["subnet"]; ok && !parsesAs(raw, cidrOnly) {
		return path + ".subnet"
	}
	for _, k := range []string{"rangeStart", "rangeEnd", "gateway"} {
		if raw, ok := r[k]; ok && !parsesAs(raw, addrOnly) {
			return path + "." + k
		}
	}
	return ""
}

// What a field may hold.
const (
	cidrOnly   = iota // types.IPNet: "10.0.0.0/24"
	addrOnly          // net.IP: "10.0.0.1"
	addrOrCIDR        // plugins' ip.IP: either
)

// parsesAs reports whether raw is a JSON string holding what kind allows.
func parsesAs(raw json.RawMessage, kind int) bool {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	_, _, cidrErr := net.ParseCIDR(s)
	isAddr := net.ParseIP(s) != nil
	switch kind {
	case cidrOnly:
		return cidrErr == nil
	case addrOnly:
		return isAddr || s == "" // net.IP decodes "" and null as unset
	}
	return cidrErr == nil || isAddr
}
