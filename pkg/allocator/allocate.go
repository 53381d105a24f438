package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Plugin-specific CNI error codes (100+ are the plugin's own, per the spec).
const (
	// ErrRangeExhausted: a range set has no free address.
	ErrRangeExhausted uint = 100
	// ErrAddressUnavailable: a requested address cannot be had, or the
	// attachment already holds an address in the range set.
	ErrAddressUnavailable uint = 101
	// ErrStatusUnavailable is STATUS's "cannot service ADD" code.
	ErrStatusUnavailable uint = 50
)

// Owner identifies who an allocation is for: the runtime's attachment and,
// when the runtime said so in CNI_ARGS, the Kubernetes pod.
type Owner struct {
	ContainerID string
	IfName      string
	Netns       string
	// NetnsWitness is what the plugin saw of Netns (WitnessNetns).
	NetnsWitness NetnsWitness
	PodNamespace string
	PodName      string
	PodUID       string
}

// Attachment is the attachment o's allocation is reserved for.
func (o Owner) Attachment() Attachment { return Attachment{o.ContainerID, o.IfName} }

// AllocateRequest is one IPAM ADD.
type AllocateRequest struct {
	Network   string
	RangeSets []StoredRangeSet
	Owner     Owner
	// Requested addresses (CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips), in order.
	Requested []netip.Addr
	Now       time.Time
	// View is how the plugin sees the runtime's netns directory: with it,
	// the ADD frees records whose sandbox is provably torn down
	// (PluginReleases); nil frees none.
	View NetnsView
	// Walk, when not nil, moves the view's walk for namespaces still held
	// out of the transaction (HoldersWalk); nil walks inside it.
	Walk *HoldersWalk
}

// Allocate reserves one address per range set for req.Owner, exactly as
// host-local would for the same state: requested addresses first, otherwise
// round-robin from the range set's last reserved address.
//
// Before choosing, it frees the pod's other sandboxes whose netns is torn
// down (ReasonPodSandboxReplaced); a range set found full is chosen from
// again after freeing every record whose netns is torn down
// (ReasonNetnsGoneAtExhaustion). Neither moves a round-robin point.
//
// On failure it undoes its reservations the way host-local does (releasing the
// attachment's addresses) but keeps the moved round-robin points, so later
// choices still match host-local's. An exhaustion is counted in the store.
// The caller commits the transaction in both cases.
func Allocate(tx Store, req AllocateRequest) ([]*Record, *types.Error) {
	if err := tx.Configure(req.Network, req.RangeSets); err != nil {
		return nil, ioError(err)
	}
	// Requested addresses are a set, as in host-local: the same address asked
	// for twice (say CNI_ARGS IP= and runtimeConfig.ips) is one request.
	var requested []netip.Addr
	for _, ip := range req.Requested {
		if !slices.Contains(requested, ip) {
			requested = append(requested, ip)
		}
	}
	judge := newDeathJudge(req.View, req.Owner, req.Walk)
	if err := judge.releaseReplaced(tx, req.Now); err != nil {
		return nil, ioError(err)
	}
	var got []*Record
	undo := func() {
		if len(got) > 0 {
			_, _ = Release(tx, req.Owner.Attachment(), Why{Reason: "allocation failed", By: ByPlugin}, req.Now)
		}
	}
	for idx, set := range req.RangeSets {
		want := netip.Addr{}
		for i, ip := range requested {
			if rangeFor(set, ip) >= 0 {
				want = ip
				requested = append(requested[:i], requested[i+1:]...)
				break
			}
		}
		rec, cerr := allocateOne(tx, req, judge, idx, set, want)
		if cerr != nil {
			undo()
			cerr.Msg = fmt.Sprintf("failed to allocate for range %d: %s", idx, cerr.Msg)
			return nil, cerr
		}
		got = append(got, rec)
	}
	if len(requested) > 0 {
		undo()
		var b strings.Builder
		b.WriteString("failed to allocate all requested IPs:")
		for _, ip := range requested {
			b.WriteString(" " + ip.String())
		}
		return nil, types.NewError(ErrAddressUnavailable, b.String(), "")
	}
	return got, nil
}

// allocateOne reserves one address of range set idx for req.Owner: want
// when it is valid, else the next free one.
func allocateOne(tx Store, req AllocateRequest, judge *deathJudge, idx int, set StoredRangeSet, want netip.Addr) (*Record, *types.Error) {
	var ip netip.Addr
	var ri int
	var cerr *types.Error
	if want.IsValid() {
		ip, ri, cerr = want, rangeFor(set, want), checkRequested(tx, set, want, req.Now)
	} else {
		ip, ri, cerr = nextAddr(tx, req, judge, idx, set)
	}
	if cerr != nil {
		return nil, cerr
	}
	r := set.Ranges[ri]
	rec := &Record{
		IP:           ip,
		PrefixLen:    r.Subnet.Bits(),
		Gateway:      r.Gateway,
		RangeSet:     idx,
		ContainerID:  req.Owner.ContainerID,
		IfName:       req.Owner.IfName,
		Network:      req.Network,
		PodNamespace: req.Owner.PodNamespace,
		PodName:      req.Owner.PodName,
		PodUID:       req.Owner.PodUID,
		Netns:        req.Owner.Netns,
		NetnsWitness: req.Owner.NetnsWitness,
		State:        StatePending,
		Source:       "add",
		Created:      req.Now,
	}
	if err := tx.Put(rec); err != nil {
		return nil, ioError(err)
	}
	if err := tx.SetLastReserved(idx, ip); err != nil {
		return nil, ioError(err)
	}
	return rec, nil
}

// checkRequested refuses a requested address that is the subnet's gateway
// or is not free (Store.Free: the store verifies its bitmap).
func checkRequested(tx Store, set StoredRangeSet, want netip.Addr, now time.Time) *types.Error {
	if want == set.Ranges[rangeFor(set, want)].Gateway {
		return types.NewError(ErrAddressUnavailable, fmt.Sprintf("requested ip %s is subnet's gateway", want), "")
	}
	free, err := tx.Free(want, now)
	if err != nil {
		return ioError(err)
	}
	if !free {
		return types.NewError(ErrAddressUnavailable,
			fmt.Sprintf("requested IP address %s is not available in range set %s", want, set.String()), "")
	}
	return nil
}

// nextAddr is the next free address of range set idx after its
// round-robin point (Store.NextFree). The attachment may hold no address
// in the range set already. A full range set is chosen from again after
// the judge freed the records whose netns is torn down; one still full is
// counted (RecordExhaustion) and refused.
func nextAddr(tx Store, req AllocateRequest, judge *deathJudge, idx int, set StoredRangeSet) (netip.Addr, int, *types.Error) {
	recs, err := attachmentRecordsAny(tx, req.Owner.Attachment())
	if err != nil {
		return netip.Addr{}, 0, ioError(err)
	}
	for _, r := range recs {
		if rangeFor(set, r.IP) >= 0 {
			return netip.Addr{}, 0, types.NewError(ErrAddressUnavailable,
				fmt.Sprintf("%s has been allocated to %s, duplicate allocation is not allowed", r.IP, req.Owner.ContainerID), "")
		}
	}
	last, hasLast := tx.LastReserved(idx)
	ip, ri, ok, err := tx.NextFree(set, last, hasLast, req.Now)
	if err == nil && !ok {
		var n int
		if n, err = judge.releaseDead(tx, req.Now); err == nil && n > 0 {
			ip, ri, ok, err = tx.NextFree(set, last, hasLast, req.Now)
		}
	}
	if err != nil {
		return netip.Addr{}, 0, ioError(err)
	}
	if !ok {
		desc := set.String()
		if err := tx.RecordExhaustion(idx, desc, req.Now); err != nil {
			return netip.Addr{}, 0, ioError(err)
		}
		return netip.Addr{}, 0, types.NewError(ErrRangeExhausted, "no IP addresses available in range set: "+desc, "")
	}
	return ip, ri, nil
}

// attachmentRecordsAny returns the attachment's records together with the container's
// ID-only records, in the order host-local's duplicate check finds them (its
// directory walk: file names, i.e. address strings, in lexical order), so that
// a refused duplicate ADD names the same address.
func attachmentRecordsAny(tx Store, a Attachment) ([]*Record, error) {
	recs, err := tx.Records(Query{Attachment: &a})
	if err != nil || a.IfName == "" {
		return recs, err
	}
	legacy, err := tx.Records(Query{Attachment: &Attachment{a.ContainerID, ""}})
	if err != nil {
		return nil, err
	}
	recs = append(recs, legacy...)
	slices.SortFunc(recs, func(a, b *Record) int { return strings.Compare(a.IP.String(), b.IP.String()) })
	return recs, nil
}

func ioError(err error) *types.Error {
	return types.NewError(types.ErrIOFailure, err.Error(), "")
}
