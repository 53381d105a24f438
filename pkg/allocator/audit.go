package allocator

import (
	"net/netip"
	"time"
)

// AuditEvent is one release or reclaim kept in the store's bounded audit log.
type AuditEvent struct {
	Time        time.Time  `json:"time"`
	Action      string     `json:"action"` // one of the Audit* actions below
	Reason      string     `json:"reason,omitempty"`
	IP          netip.Addr `json:"ip,omitzero"`
	ContainerID string     `json:"containerID,omitempty"`
	IfName      string     `json:"ifName,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	// PodUID is the pod's UID, for releases the daemon reports on the pod
	// (the plugin's: PluginReasons); empty in other entries.
	PodUID string `json:"podUID,omitempty"`
	// By names who acted: ByPlugin, ByDaemon, or ByCLI(verb).
	By string `json:"by,omitempty"`
}

// Who acted (AuditEvent.By): the plugin, the daemon, or a CLI verb.
const (
	ByPlugin = "plugin"
	ByDaemon = "hostlease-gc"
)

// ByCLI is the actor of an entry written by hostlease-gc's CLI verb verb:
// "cli:" followed by the verb ("cli:import", "cli:release", "cli:rebuild").
func ByCLI(verb string) string { return "cli:" + verb }

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
	// host-local's own DEL removed since (ReleaseHostLocalGone).
	AuditHostLocalGone = "hostlocal-gone"
	// AuditImportConflict: a host-local reservation file names an address
	// the store holds for another attachment (or a damaged record): the
	// address stays reserved for the store's holder (MergeHostLocal).
	AuditImportConflict = "import-conflict"
	// AuditDamagedEntry stands for an audit entry that does not decode in
	// AuditLog's answer.
	AuditDamagedEntry = "damaged-entry"

	// Written by the daemon (pkg/daemon): a leak reclaimed (through
	// ReleaseRecord), an address a running sandbox uses re-reserved for it,
	// a store rebuilt from the runtime.
	AuditReclaim   = "reclaim"
	AuditReReserve = "re-reserve"
	AuditRebuild   = "rebuild"
)
