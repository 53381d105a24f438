package allocator

import (
	"net/netip"
	"time"
)

// State is where an allocation stands in its chain's life.
type State string

const (
	// StatePending: IPAM ADD reserved the address; nothing yet proves the rest
	// of the chain succeeded.
	StatePending State = "pending"
	// StateCommitted: the commit marker ran (the whole chain succeeded), CRI
	// reported the sandbox READY with this address, or the record was imported
	// from host-local state that was in use.
	StateCommitted State = "committed"
)

// Record is one reserved address. It carries who holds it and why, so that an
// operator (and the daemon) can tell a live allocation from a leak.
type Record struct {
	Version      int        `json:"v"`
	IP           netip.Addr `json:"ip"`
	PrefixLen    int        `json:"prefixLen"`
	Gateway      netip.Addr `json:"gateway,omitzero"`
	RangeSet     int        `json:"rangeSet"`
	ContainerID  string     `json:"containerID"`
	IfName       string     `json:"ifName"`
	Network      string     `json:"network"`
	PodNamespace string     `json:"podNamespace,omitempty"`
	PodName      string     `json:"podName,omitempty"`
	PodUID       string     `json:"podUID,omitempty"`
	Netns        string     `json:"netns,omitempty"`
	// NetnsWitness is what the plugin saw of Netns at ADD (netns.go); zero
	// for a record without one.
	NetnsWitness NetnsWitness `json:"netnsWitness,omitzero"`
	State        State        `json:"state"`
	Source       string       `json:"source,omitempty"` // "add", "host-local", "rebuild"
	Created      time.Time    `json:"created"`
	Committed    time.Time    `json:"committed,omitzero"`
	Obs          Observation  `json:"obs,omitzero"`
}

// Observation is what the daemon last saw of a record's sandbox. The plugin
// never writes it; the daemon owns it.
type Observation struct {
	// Misses counts consecutive sweeps that did not find the sandbox in CRI,
	// capped at the daemon's --misses (more changes no decision, and a capped
	// count spares rewriting every absent record on every sweep).
	Misses int `json:"misses,omitempty"`
	// FirstMissed is when the current absence began (zero while listed).
	FirstMissed time.Time `json:"firstMissed,omitzero"`
	// Verdict is the policy's last reason, shown by `hostlease-gc leaks`.
	Verdict string `json:"verdict,omitempty"`
	// SandboxState is what CRI last said: READY, NOTREADY, UNKNOWN or absent.
	SandboxState string `json:"sandboxState,omitempty"`
}

// PodRef names the pod for humans: "namespace/name", or "" when unknown.
func (r *Record) PodRef() string {
	if r.PodName == "" {
		return ""
	}
	return r.PodNamespace + "/" + r.PodName
}

// Prefix is the address with its subnet's prefix length, as CNI results show it.
func (r *Record) Prefix() netip.Prefix { return netip.PrefixFrom(r.IP, r.PrefixLen) }

// Exhaustion counts ADDs that failed because a range set had no free address.
// The plugin writes it; the daemon exports it and sweeps at once when it grows.
type Exhaustion struct {
	Count    uint64    `json:"count"`
	Last     time.Time `json:"last"`
	RangeSet string    `json:"rangeSet"` // the range set as host-local prints it
}

// SourceHostLocal is Record.Source for a record imported from host-local.
const SourceHostLocal = "host-local"

// AllocationID is the identity of one allocation: its address, reserved
// for one attachment at one instant (Created, in Unix nanoseconds). These
// fields never change during an allocation's life; every other field does
// (state, commit time, pod details a later ADD fills in, the daemon's
// observation). It is comparable: the key of whatever is kept about an
// allocation across transactions (the daemon's observations across
// sweeps).
type AllocationID struct {
	IP         netip.Addr
	Attachment Attachment
	Created    int64
}

// ID is r's AllocationID.
func (r *Record) ID() AllocationID {
	return AllocationID{r.IP, r.Attachment(), r.Created.UnixNano()}
}

// SameAllocation reports whether a and b are the same allocation (the same
// AllocationID). A writer that read a record earlier and wants to change or
// free it checks this against the record as it is now: false means the
// address was released and reserved again (perhaps by the same attachment)
// since, and the earlier read must not be acted on.
func SameAllocation(a, b *Record) bool { return a.ID() == b.ID() }
