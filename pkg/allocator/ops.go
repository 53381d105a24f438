package allocator

import (
	"fmt"
	"math/big"
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
	ContainerID  string
	IfName       string
	Netns        string
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
}

// rangeSetString prints a range set as host-local does in its errors.
func rangeSetString(set StoredRangeSet) string {
	parts := make([]string, len(set.Ranges))
	for i, r := range set.Ranges {
		parts[i] = r.Start.String() + "-" + r.End.String()
	}
	return strings.Join(parts, ",")
}

// Allocate reserves one address per range set for req.Owner, exactly as
// host-local would for the same state: requested addresses first, otherwise
// round-robin from the range set's last reserved address.
//
// On failure it undoes its reservations the way host-local does (releasing the
// attachment's addresses) but keeps the moved round-robin points, so later
// choices still match host-local's. An exhaustion is counted in the store.
// The caller commits the transaction in both cases.
func Allocate(tx *Tx, req AllocateRequest) ([]*Record, *types.Error) {
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
	var got []*Record
	undo := func() {
		if len(got) > 0 {
			_, _ = Release(tx, req.Owner.ContainerID, req.Owner.IfName, "allocation failed", "plugin", req.Now)
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
		rec, cerr := allocateOne(tx, req, idx, set, want)
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

func allocateOne(tx *Tx, req AllocateRequest, idx int, set StoredRangeSet, want netip.Addr) (*Record, *types.Error) {
	var ip netip.Addr
	ri := -1
	if want.IsValid() {
		ri = rangeFor(set, want)
		if want == set.Ranges[ri].Gateway {
			return nil, types.NewError(ErrAddressUnavailable, fmt.Sprintf("requested ip %s is subnet's gateway", want), "")
		}
		if held := tx.hasRecord(want); tx.Taken(want) || held {
			if held && !tx.Taken(want) {
				if _, err := tx.RepairIndexes(fmt.Sprintf("ADD: requested %s has a record but the taken bitmap marked it free", want), req.Now); err != nil {
					return nil, ioError(err)
				}
			}
			return nil, types.NewError(ErrAddressUnavailable,
				fmt.Sprintf("requested IP address %s is not available in range set %s", want, rangeSetString(set)), "")
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
		for repaired := false; ; repaired = true {
			var ok bool
			ip, ri, ok = NextFree(set, last, hasLast, tx.takenIter())
			if !ok {
				desc := rangeSetString(set)
				if err := tx.RecordExhaustion(idx, desc, req.Now); err != nil {
					return nil, ioError(err)
				}
				return nil, types.NewError(ErrRangeExhausted, "no IP addresses available in range set: "+desc, "")
			}
			// The bitmap chose ip; the records decide (integrity.go). A
			// record there means the bitmap lost its bit: rebuild the
			// indexes from the records and choose again.
			if !tx.hasRecord(ip) {
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

// Held returns the attachment's records, falling back (as host-local does)
// to records written with the container ID alone by old host-local versions.
//
// It finds them even when the owner index lost them: an empty answer from
// the index is believed only for a large store whose indexes agree with the
// records count (needScan; Tx.indexesAgree reads no record); otherwise the
// records are read, and in a write transaction the indexes are repaired from
// them when they disagree (audited; Tx.Repairs). DEL, CHECK and the commit
// marker use it; ADD's hot path does not.
func Held(tx *Tx, containerID, ifname string) ([]*Record, error) {
	recs, err := heldByIndex(tx, containerID, ifname)
	if err != nil || len(recs) > 0 {
		return recs, err
	}
	n, known := tx.recordCount()
	if !needScan(n, known, tx.indexesAgree) {
		return nil, nil
	}
	recs = tx.scanOwner(containerID, ifname)
	if len(recs) == 0 && ifname != "" {
		recs = tx.scanOwner(containerID, "")
	}
	if tx.btx.Writable() && (len(recs) > 0 || !tx.indexesAgree()) {
		why := fmt.Sprintf("lookup of container %s ifname %q: the indexes disagree with the records count", containerID, ifname)
		if len(recs) > 0 {
			why = fmt.Sprintf("lookup of container %s ifname %q: %d records missing from the owner index", containerID, ifname, len(recs))
		}
		if _, err := tx.RepairIndexes(why, time.Now()); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// scanAlwaysBelow is the number of records below which an owner the index
// does not know is always looked for in the records: a scan of that many
// costs about what the exec of the plugin does, and it also finds an index
// entry filed under the wrong owner, which keeps every count equal. A node's
// pool is usually far smaller (a /24).
const scanAlwaysBelow = 2048

// needScan decides whether an attachment the owner index does not know must
// be looked for in the records. records is the count kept in meta (known is
// false when it is absent or damaged); agree is the cheap count comparison
// (Tx.indexesAgree), called only for large stores.
func needScan(records int, known bool, agree func() bool) bool {
	switch {
	case !known:
		return true
	case records == 0:
		return !agree() // nothing should be there; stray index entries say otherwise
	case records < scanAlwaysBelow:
		return true
	}
	return !agree()
}

func heldByIndex(tx *Tx, containerID, ifname string) ([]*Record, error) {
	recs, err := tx.ByOwner(containerID, ifname)
	if err != nil || len(recs) > 0 || ifname == "" {
		return recs, err
	}
	return tx.ByOwner(containerID, "")
}

// heldAny returns the attachment's records together with the container's
// ID-only records, in the order host-local's duplicate check finds them (its
// directory walk: file names, i.e. address strings, in lexical order), so that
// a refused duplicate ADD names the same address.
func heldAny(tx *Tx, containerID, ifname string) ([]*Record, error) {
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

// Release frees every address held by (containerID, ifname) and records each
// in the audit log. Releasing nothing is not an error: DEL is idempotent.
func Release(tx *Tx, containerID, ifname, reason, by string, now time.Time) ([]*Record, error) {
	recs, err := Held(tx, containerID, ifname)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if err := releaseRecord(tx, r, AuditRelease, reason, by, now); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// releaseRecord deletes r, a record read in this transaction, and audits it.
func releaseRecord(tx *Tx, r *Record, action, reason, by string, now time.Time) error {
	if err := tx.deleteRead(r); err != nil {
		return err
	}
	return tx.Audit(AuditEvent{
		Time: now, Action: action, Reason: reason, IP: r.IP,
		ContainerID: r.ContainerID, IfName: r.IfName, Pod: r.PodRef(), By: by,
	})
}

// Commit marks the attachment's allocations committed: the chain reached its
// last plugin, so the sandbox's network setup succeeded. It returns how many
// records changed.
func Commit(tx *Tx, containerID, ifname string, now time.Time) (int, error) {
	recs, err := Held(tx, containerID, ifname)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if r.State == StateCommitted {
			continue
		}
		r.State, r.Committed = StateCommitted, now
		if err := tx.Put(r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// GarbageCollect releases every allocation whose attachment is not in valid
// (the CNI GC verb). A record written without an ifname is kept when any valid
// attachment has its container ID. A damaged record is kept (its owner cannot
// be told) and noted (Tx.DamagedSeen).
func GarbageCollect(tx *Tx, valid []Attachment, now time.Time) ([]*Record, error) {
	keep := make(map[Attachment]bool, len(valid))
	ids := make(map[string]bool, len(valid))
	for _, a := range valid {
		keep[a] = true
		ids[a.ContainerID] = true
	}
	var gone []*Record
	err := tx.ForEach(func(r *Record) error {
		if !keep[Attachment{r.ContainerID, r.IfName}] && !(r.IfName == "" && ids[r.ContainerID]) {
			gone = append(gone, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range gone {
		if err := releaseRecord(tx, r, AuditGC, "not in cni.dev/valid-attachments", "plugin", now); err != nil {
			return nil, err
		}
	}
	return gone, nil
}

// FullRangeSets returns the indexes of range sets with no free address.
func FullRangeSets(tx *Tx, sets []StoredRangeSet) []int {
	var full []int
	for i, set := range sets {
		if _, _, ok := NextFree(set, netip.Addr{}, false, tx.takenIter()); !ok {
			full = append(full, i)
		}
	}
	return full
}

// PoolUsage is the size and use of one range set.
type PoolUsage struct {
	RangeSet int
	Desc     string
	Size     *big.Int // allocatable addresses (gateways excluded)
	Used     int      // reserved addresses inside the range set
}

// Free is Size - Used, as a float for metrics (IPv6 sizes exceed int64).
func (p PoolUsage) Free() float64 {
	f, _ := new(big.Int).Sub(p.Size, big.NewInt(int64(p.Used))).Float64()
	return f
}

// Usage measures every range set. It walks the reserved addresses once.
func Usage(tx *Tx, sets []StoredRangeSet) []PoolUsage {
	out := make([]PoolUsage, len(sets))
	for i, set := range sets {
		u := PoolUsage{RangeSet: i, Desc: rangeSetString(set), Size: new(big.Int)}
		for _, r := range set.Ranges {
			n := new(big.Int).Sub(addrInt(r.End), addrInt(r.Start))
			n.Add(n, big.NewInt(1))
			if r.Contains(r.Gateway) {
				n.Sub(n, big.NewInt(1))
			}
			u.Size.Add(u.Size, n)
			it := tx.takenIter()
			for t, ok := it.Seek(r.Start); ok && t.Compare(r.End) <= 0 && t.BitLen() == r.Start.BitLen(); t, ok = it.Next() {
				if t != r.Gateway { // not in Size either (reserved under an older config)
					u.Used++
				}
			}
		}
		out[i] = u
	}
	return out
}

func addrInt(a netip.Addr) *big.Int {
	b := a.AsSlice()
	return new(big.Int).SetBytes(b)
}

func ioError(err error) *types.Error {
	return types.NewError(types.ErrIOFailure, err.Error(), "")
}
