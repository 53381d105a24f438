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
	if err := tx.SetNetwork(req.Network); err != nil {
		return nil, ioError(err)
	}
	if err := tx.SetRangeSets(req.RangeSets); err != nil {
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
	judge := newDeathJudge(req.View, req.Owner)
	if err := judge.releaseReplaced(tx, req.Now); err != nil {
		return nil, ioError(err)
	}
	var got []*Record
	undo := func() {
		if len(got) > 0 {
			_, _ = Release(tx, req.Owner.ContainerID, req.Owner.IfName, Why{Reason: "allocation failed", By: ByPlugin}, req.Now)
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

func allocateOne(tx Store, req AllocateRequest, judge *deathJudge, idx int, set StoredRangeSet, want netip.Addr) (*Record, *types.Error) {
	var ip netip.Addr
	ri := -1
	if want.IsValid() {
		ri = rangeFor(set, want)
		if want == set.Ranges[ri].Gateway {
			return nil, types.NewError(ErrAddressUnavailable, fmt.Sprintf("requested ip %s is subnet's gateway", want), "")
		}
		if held := tx.HasRecord(want); tx.Taken(want) || held {
			if held && !tx.Taken(want) {
				if _, err := tx.RepairIndexes(fmt.Sprintf("ADD: requested %s has a record but the taken bitmap marked it free", want), req.Now); err != nil {
					return nil, ioError(err)
				}
			}
			return nil, types.NewError(ErrAddressUnavailable,
				fmt.Sprintf("requested IP address %s is not available in range set %s", want, set.String()), "")
		}
		ip = want
	} else {
		held, err := heldAny(tx, req.Owner.ContainerID, req.Owner.IfName)
		if err != nil {
			return nil, ioError(err)
		}
		for _, r := range held {
			if rangeFor(set, r.IP) >= 0 {
				return nil, types.NewError(ErrAddressUnavailable,
					fmt.Sprintf("%s has been allocated to %s, duplicate allocation is not allowed", r.IP, req.Owner.ContainerID), "")
			}
		}
		last, hasLast := tx.LastReserved(idx)
		healed := false
		for repaired := false; ; repaired = true {
			var ok bool
			ip, ri, ok = NextFree(set, last, hasLast, tx.Reserved())
			if !ok && !healed {
				healed = true
				n, err := judge.releaseDead(tx, req.Now)
				if err != nil {
					return nil, ioError(err)
				}
				if n > 0 {
					ip, ri, ok = NextFree(set, last, hasLast, tx.Reserved())
				}
			}
			if !ok {
				desc := set.String()
				if err := tx.RecordExhaustion(idx, desc, req.Now); err != nil {
					return nil, ioError(err)
				}
				return nil, types.NewError(ErrRangeExhausted, "no IP addresses available in range set: "+desc, "")
			}
			// The bitmap chose ip; the records decide (the store verifies). A
			// record there means the bitmap lost its bit: rebuild the
			// indexes from the records and choose again.
			if !tx.HasRecord(ip) {
				break
			}
			if repaired {
				return nil, ioError(fmt.Errorf("taken bitmap still marks %s free after its repair from the records", ip))
			}
			if _, err := tx.RepairIndexes(fmt.Sprintf("ADD: %s has a record but the taken bitmap marked it free", ip), req.Now); err != nil {
				return nil, ioError(err)
			}
		}
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

// heldAny returns the attachment's records together with the container's
// ID-only records, in the order host-local's duplicate check finds them (its
// directory walk: file names, i.e. address strings, in lexical order), so that
// a refused duplicate ADD names the same address.
func heldAny(tx Store, containerID, ifname string) ([]*Record, error) {
	recs, err := tx.ByOwner(containerID, ifname)
	if err != nil || ifname == "" {
		return recs, err
	}
	legacy, err := tx.ByOwner(containerID, "")
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
