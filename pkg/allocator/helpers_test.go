package allocator

import (
	"net/netip"
	"reflect"
	"testing"
)

// rng builds a canonical range the way host-local canonicalises one.
func rng(subnet, start, end, gw string) StoredRange {
	r := StoredRange{Subnet: netip.MustParsePrefix(subnet), Start: netip.MustParseAddr(start), End: netip.MustParseAddr(end)}
	if gw != "" {
		r.Gateway = netip.MustParseAddr(gw)
	}
	return r
}

func set(ranges ...StoredRange) StoredRangeSet { return StoredRangeSet{Ranges: ranges} }

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}
