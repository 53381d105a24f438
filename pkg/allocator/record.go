package allocator

import (
	"fmt"
	"net/netip"
	"time"
)

// SchemaVersion is the version of the store layout (buckets and binary
// values, codec.go) this code reads and writes. A store of any other schema is
// refused (ErrStoreSchema): older ones (1: JSON values) never left this
// repository, and a newer one would be misread.
const SchemaVersion = 2

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
	Version      int         `json:"v"`
	IP           netip.Addr  `json:"ip"`
	PrefixLen    int         `json:"prefixLen"`
	Gateway      netip.Addr  `json:"gateway,omitzero"`
	RangeSet     int         `json:"rangeSet"`
	ContainerID  string      `json:"containerID"`
	IfName       string      `json:"ifName"`
	Network      string      `json:"network"`
	PodNamespace string      `json:"podNamespace,omitempty"`
	PodName      string      `json:"podName,omitempty"`
	PodUID       string      `json:"podUID,omitempty"`
	Netns        string      `json:"netns,omitempty"`
	State        State       `json:"state"`
	Source       string      `json:"source,omitempty"` // "add", "host-local", "rebuild"
	Created      time.Time   `json:"created"`
	Committed    time.Time   `json:"committed,omitzero"`
	Obs          Observation `json:"obs,omitzero"`
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

func encodeRecord(r *Record) ([]byte, error) {
	r.Version = binaryFormat
	return appendRecord(r), nil
}

// decodeAt reads the record stored under key: decodeRecord, and the address
// it names must be the key's. A record naming another address is damaged (a
// write of it would touch the other address's record and index entries).
func decodeAt(key, v []byte) (*Record, error) {
	r, err := decodeRecord(v)
	if err != nil {
		return nil, err
	}
	if ip, ok := keyAddr(key); !ok || ip != r.IP {
		return nil, fmt.Errorf("undecodable record: it names %s but is stored under key %x", r.IP, key)
	}
	return r, nil
}

// decodeRecord reads a stored record (codec.go's binary form).
func decodeRecord(b []byte) (*Record, error) {
	r, err := readRecord(b)
	if err != nil {
		return nil, fmt.Errorf("undecodable record: %w", err)
	}
	return r, nil
}

// AuditEvent is one release or reclaim kept in the store's bounded audit log.
type AuditEvent struct {
	Time        time.Time  `json:"time"`
	Action      string     `json:"action"` // release, gc, reclaim, manual-release, rebuild, import
	Reason      string     `json:"reason,omitempty"`
	IP          netip.Addr `json:"ip,omitzero"`
	ContainerID string     `json:"containerID,omitempty"`
	IfName      string     `json:"ifName,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	By          string     `json:"by,omitempty"` // plugin, hostlease-gc, operator
}

// Exhaustion counts ADDs that failed because a range set had no free address.
// The plugin writes it; the daemon exports it and sweeps at once when it grows.
type Exhaustion struct {
	Count    uint64    `json:"count"`
	Last     time.Time `json:"last"`
	RangeSet string    `json:"rangeSet"` // the range set as host-local prints it
}
