package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// The rows `hostlease-gc <command> -o json` prints, one JSON array of them per
// command. They are the CLI's contract with operators and their scripts:
// cmd/ipam-gc writes exactly these types and the e2e and integration suites
// read them back with these types through DecodeRows and DecodeList, which
// refuse a field the type does not declare (a drift of the contract).
// The JSON field names are part of the contract: rename none, and add a field
// only with a name not used before; cmd/ipam-gc's tests pin every name.
//
//	status -o json   []PoolRow
//	list -o json     []ListRow, with a DamagedRow (state "damaged")
//	                 for each record that does not decode
//	leaks -o json    []LeakRow
//	audit -o json    []AuditRow

// PoolRow is one range set of one network, as `status` shows it. Size and
// Free are exact decimal integers in strings: a /64 holds 2^64 addresses,
// more than common JSON tools (jq, JavaScript) read exactly as numbers.
//
// A store that cannot be read is one row with RangeSet -1 and Error. A store
// whose range sets are not known yet is one row with RangeSet -1, Used,
// Damaged and Note. A damaged record is a row of its own with IP and Damage
// (its decode error) besides the range set rows, which count it in Damaged.
type PoolRow struct {
	Network  string `json:"network"`
	RangeSet int    `json:"rangeSet"`
	Ranges   string `json:"ranges"`
	Size     string `json:"size,omitempty"`
	Used     int    `json:"used"`
	Free     string `json:"free,omitempty"`
	Pending  int    `json:"pending"`
	// LeakCandidates counts the range set's records that are leak
	// candidates by their stored observation (reclaim.IsLeakCandidate).
	LeakCandidates int    `json:"leakCandidates"`
	Exhaustions    uint64 `json:"exhaustions"`
	Damaged        int    `json:"damaged"`
	IP             string `json:"ip,omitempty"`
	Damage         string `json:"damage,omitempty"`
	Note           string `json:"note,omitempty"`
	Error          string `json:"error,omitempty"`
	// ReadOnly is why the store cannot be written (the plugin's ADD and DEL
	// would fail), on every row of that store; empty when it can be.
	ReadOnly string `json:"readOnly,omitempty"`
}

// ListRow is one record as `list -o json` prints it: the stored record's
// fields under their stored names, without the store's internal format
// version. DecodeList reads it back as an allocator.Record.
type ListRow struct {
	IP           netip.Addr             `json:"ip"`
	PrefixLen    int                    `json:"prefixLen"`
	Gateway      netip.Addr             `json:"gateway,omitzero"`
	RangeSet     int                    `json:"rangeSet"`
	ContainerID  string                 `json:"containerID"`
	IfName       string                 `json:"ifName"`
	Network      string                 `json:"network"`
	PodNamespace string                 `json:"podNamespace,omitempty"`
	PodName      string                 `json:"podName,omitempty"`
	PodUID       string                 `json:"podUID,omitempty"`
	Netns        string                 `json:"netns,omitempty"`
	NetnsWitness allocator.NetnsWitness `json:"netnsWitness,omitzero"`
	State        allocator.State        `json:"state"`
	Source       string                 `json:"source,omitempty"`
	Created      time.Time              `json:"created"`
	Committed    time.Time              `json:"committed,omitzero"`
	Obs          allocator.Observation  `json:"obs,omitzero"`
}

// NewListRow is r as `list -o json` prints it.
func NewListRow(r *allocator.Record) ListRow {
	return ListRow{IP: r.IP, PrefixLen: r.PrefixLen, Gateway: r.Gateway, RangeSet: r.RangeSet, ContainerID: r.ContainerID,
		IfName: r.IfName, Network: r.Network, PodNamespace: r.PodNamespace, PodName: r.PodName, PodUID: r.PodUID,
		Netns: r.Netns, NetnsWitness: r.NetnsWitness, State: r.State, Source: r.Source, Created: r.Created,
		Committed: r.Committed, Obs: r.Obs}
}

// DamagedRow is a damaged record in `list -o json`, beside the records: State
// is "damaged", IP the address ("" when the key is damaged too) and Error why
// its value does not decode; ContainerID and IfName name the owner as far as
// the damaged bytes can be read (a hint, not the truth).
type DamagedRow struct {
	IP          string `json:"ip"`
	Network     string `json:"network"`
	State       string `json:"state"`
	Error       string `json:"error"`
	ContainerID string `json:"containerID,omitempty"`
	IfName      string `json:"ifName,omitempty"`
}

// DamagedState is a DamagedRow's State.
const DamagedState = "damaged"

// LeakRow is one leak candidate (or reclaim-eligible record) of `leaks` and
// the verdict the daemon's policy gives it now.
type LeakRow struct {
	Network string `json:"network"`
	IP      string `json:"ip"`
	Pod     string `json:"pod,omitempty"`
	Sandbox string `json:"sandbox"`
	State   string `json:"state"`
	// AgeSeconds is the allocation's age in whole seconds.
	AgeSeconds int64  `json:"ageSeconds"`
	Verdict    string `json:"verdict"` // reclaim, or why not
	Reason     string `json:"reason"`
	Detail     string `json:"detail"`
}

// AuditRow is one audit log entry of one network, as `audit` shows it.
type AuditRow struct {
	Network string `json:"network"`
	allocator.AuditEvent
}

// DecodeRows decodes one command's `-o json` output into its row type (PoolRow,
// LeakRow, AuditRow), refusing any field the type does not declare.
func DecodeRows[Row any](data []byte) ([]Row, error) {
	var rows []Row
	if err := decodeStrict(data, &rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// DecodeList decodes `list -o json`: the records, and the damaged records
// (state "damaged") beside them, refusing any undeclared field.
func DecodeList(data []byte) ([]allocator.Record, []DamagedRow, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, nil, err
	}
	var recs []allocator.Record
	var damaged []DamagedRow
	for i, r := range raw {
		var probe struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(r, &probe); err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if probe.State == DamagedState {
			var d DamagedRow
			if err := decodeStrict(r, &d); err != nil {
				return nil, nil, fmt.Errorf("entry %d: %w", i, err)
			}
			damaged = append(damaged, d)
			continue
		}
		var rec allocator.Record
		if err := decodeStrict(r, &rec); err != nil {
			return nil, nil, fmt.Errorf("entry %d: %w", i, err)
		}
		recs = append(recs, rec)
	}
	return recs, damaged, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}
