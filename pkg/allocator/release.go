package allocator

import (
	"net/netip"
	"strings"
	"time"
)

// Why says why addresses are released, for the audit log: the action
// (AuditRelease when empty), a reason, and who released them (plugin,
// hostlease-gc, operator).
type Why struct {
	Action, Reason, By string
}

// AttachmentRecords returns the attachment's records, falling back (as host-local does)
// to records written with the container ID alone by old host-local versions.
// Each lookup is verified against the records (Query.Verify). DEL, CHECK and
// the commit marker use it; ADD's hot path does not.
func AttachmentRecords(tx Store, a Attachment) ([]*Record, error) {
	recs, err := tx.Records(Query{Attachment: &a, Verify: true})
	if err != nil || len(recs) > 0 || a.IfName == "" {
		return recs, err
	}
	return tx.Records(Query{Attachment: &Attachment{a.ContainerID, ""}, Verify: true})
}

// Release frees every address reserved for attachment a (AttachmentRecords)
// and records each in the audit log (ReleaseRecord). Releasing nothing is not
// an error: DEL is idempotent.
func Release(tx Store, a Attachment, why Why, now time.Time) ([]*Record, error) {
	recs, err := AttachmentRecords(tx, a)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if err := ReleaseRecord(tx, r, why, now); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// ReleaseRecord frees r, a record read in this transaction (and, if the
// caller read it earlier, checked with SameAllocation against the record as
// it is now), with its index entries, and writes one audit entry naming it
// (Store.Release): DEL, the GC verb, an operator's release, host-local's own
// DEL seen after an import, the daemon's reclaim.
func ReleaseRecord(tx Store, r *Record, why Why, now time.Time) error {
	return tx.Release(r, auditEntry(r.IP, r.Attachment(), r.PodRef(), why, now))
}

func auditEntry(ip netip.Addr, a Attachment, pod string, why Why, now time.Time) AuditEvent {
	if why.Action == "" {
		why.Action = AuditRelease
	}
	return AuditEvent{Time: now, Action: why.Action, Reason: why.Reason, IP: ip,
		ContainerID: a.ContainerID, IfName: a.IfName, Pod: pod, By: why.By}
}

// Released is what ReleaseIP freed: a record, a damaged record, or nothing.
type Released struct {
	Record  *Record
	Damaged *DamagedRecord
}

// ReleaseIP frees the address ip whatever holds it, a healthy record or a
// damaged one, and audits it (AuditManualRelease or AuditDamagedRelease,
// with reason and by). An address without a record releases nothing.
func ReleaseIP(tx Store, ip netip.Addr, reason, by string, now time.Time) (Released, error) {
	r, d := tx.Lookup(ip)
	switch {
	case r != nil:
		return Released{Record: r}, ReleaseRecord(tx, r, Why{Action: AuditManualRelease, Reason: reason, By: by}, now)
	case d != nil:
		why := Why{Action: AuditDamagedRelease, Reason: strings.TrimSpace(reason + " (record did not decode: " + d.Err.Error() + ")"), By: by}
		return Released{Damaged: d}, tx.ReleaseDamaged(ip, auditEntry(ip, Attachment{d.ContainerID, d.IfName}, "", why, now))
	}
	return Released{}, nil
}

// GarbageCollect releases every allocation whose attachment is not in valid
// (the CNI GC verb). A record written without an ifname is kept when any valid
// attachment has its container ID. A damaged record is kept (its owner cannot
// be told) and noted (Tx.DamagedSeen).
func GarbageCollect(tx Store, valid []Attachment, now time.Time) ([]*Record, error) {
	keep := make(map[Attachment]bool, len(valid))
	ids := make(map[string]bool, len(valid))
	for _, a := range valid {
		keep[a] = true
		ids[a.ContainerID] = true
	}
	all, err := tx.Records(Query{})
	if err != nil {
		return nil, err
	}
	var gone []*Record
	for _, r := range all {
		if !keep[r.Attachment()] && !(r.IfName == "" && ids[r.ContainerID]) {
			gone = append(gone, r)
		}
	}
	for _, r := range gone {
		if err := ReleaseRecord(tx, r, Why{Action: AuditGC, Reason: "not in cni.dev/valid-attachments", By: ByPlugin}, now); err != nil {
			return nil, err
		}
	}
	return gone, nil
}
