package allocator

import (
	"net/netip"
	"time"
)

// AuditEvent is one release or reclaim kept in the store's bounded audit log.
type AuditEvent struct {
	Time        time.Time  `json:"time"`
	Action      string     `json:"action"` // release, gc, reclaim, manual-release, rebuild, import
	Reason      string     `json:"reason,omitempty"`
	IP          netip.Addr `json:"ip,omitzero"`
	ContainerID string     `json:"containerID,omitempty"`
	IfName      string     `json:"ifName,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	// PodUID is the pod's UID, for releases the daemon reports on the pod
	// (the plugin's: PluginReasons); empty in other entries.
	PodUID string `json:"podUID,omitempty"`
	By     string `json:"by,omitempty"` // plugin, hostlease-gc, operator
}

// Audit actions (AuditEvent.Action): every value the audit log holds.
// The daemon counts AuditIndexRepair events to export index repairs.
const (
	AuditRelease        = "release"
	AuditGC             = "gc"
	AuditImport         = "import"
	AuditManualRelease  = "manual-release"
	AuditIndexRepair    = "index-repair"
	AuditDamagedRelease = "damaged-release"
	// AuditHostLocalGone: an imported host-local reservation whose file
	// host-local's own DEL removed since (ReleaseVanishedHostLocal).
	AuditHostLocalGone = "hostlocal-gone"
	// AuditDamagedEntry stands for an audit entry that does not decode in
	// AuditLog's answer.
	AuditDamagedEntry = "damaged-entry"

	// Written by the daemon (pkg/gc): a leak reclaimed (through
	// ReleaseRecord), an address a running sandbox uses re-reserved for it,
	// a store rebuilt from the runtime.
	AuditReclaim   = "reclaim"
	AuditReReserve = "re-reserve"
	AuditRebuild   = "rebuild"
)
