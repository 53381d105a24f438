package allocator

import (
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

var (
	// host-local's canonical forms of 10.0.0.0/29 and fd00::/125: the gateway
	// is rangeStart, so .2-.6 and ::2-::7 are allocatable.
	set4     = set(rng("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.1"))
	set6     = set(rng("fd00::/125", "fd00::1", "fd00::7", "fd00::1"))
	testTime = time.Unix(1700000000, 0).UTC()
)

type allocResult struct {
	recs []*Record
	err  *types.Error
}

// alloc runs one ADD in its own transaction, committed even on failure as
// cmd/ipam does.
func alloc(t *testing.T, s *memStore, sets []StoredRangeSet, id, ifname string, requested ...string) allocResult {
	t.Helper()
	req := AllocateRequest{Network: "net1", RangeSets: sets, Now: testTime,
		Owner: Owner{ContainerID: id, IfName: ifname, Netns: "/var/run/netns/" + id, PodNamespace: "ns", PodName: "pod-" + id, PodUID: "uid-" + id}}
	for _, r := range requested {
		req.Requested = append(req.Requested, netip.MustParseAddr(r))
	}
	var res allocResult
	update(t, s, func(tx Store) error {
		res.recs, res.err = Allocate(tx, req)
		return nil
	})
	return res
}

func (r allocResult) ips() []string {
	return ips(r.recs)
}

// mustGet allocates and fails the test on error.
func mustGet(t *testing.T, s *memStore, sets []StoredRangeSet, id string, requested ...string) []string {
	t.Helper()
	r := alloc(t, s, sets, id, "eth0", requested...)
	if r.err != nil {
		t.Fatalf("ADD %s: %v", id, r.err)
	}
	return r.ips()
}

func wantErr(t *testing.T, r allocResult, code uint, msg string) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("ADD succeeded with %v, want error %d %q", r.ips(), code, msg)
	}
	if r.err.Code != code || r.err.Msg != msg {
		t.Fatalf("ADD error = %d %q, want %d %q", r.err.Code, r.err.Msg, code, msg)
	}
}

func release(t *testing.T, s *memStore, id, ifname string) []string {
	t.Helper()
	var recs []*Record
	update(t, s, func(tx Store) error {
		var err error
		recs, err = Release(tx, Attachment{ContainerID: id, IfName: ifname}, Why{Reason: "DEL", By: "plugin"}, testTime)
		return err
	})
	return ips(recs)
}

func held(t *testing.T, s *memStore, id, ifname string) []string {
	t.Helper()
	var recs []*Record
	view(t, s, func(tx Store) error {
		var err error
		recs, err = AttachmentRecords(tx, Attachment{ContainerID: id, IfName: ifname})
		return err
	})
	return ips(recs)
}

func lastReserved(t *testing.T, s *memStore, idx int) string {
	t.Helper()
	var out string
	view(t, s, func(tx Store) error {
		if ip, ok := tx.LastReserved(idx); ok {
			out = ip.String()
		}
		return nil
	})
	return out
}
