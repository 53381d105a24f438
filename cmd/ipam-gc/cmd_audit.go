package main

import (
	"fmt"
	"io"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// auditRow is one audit log entry of one network, as `audit` shows it.
type auditRow struct {
	Network string `json:"network"`
	allocator.AuditEvent
}

// maxAuditLimit is the most entries a store keeps (its audit log is bounded),
// so the most --limit can mean.
const maxAuditLimit = 100000

// cmdAudit prints the newest entries of each store's audit log: releases,
// reclaims, manual releases, imports, rebuilds, index repairs.
func cmdAudit(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("audit", stderr)
	dataDir := dataDirFlag(fs)
	network := fs.String("network", "", "only this network")
	limit := fs.Int("limit", 50, fmt.Sprintf("newest entries to show per network (1..%d)", maxAuditLimit))
	out := outputFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if *limit < 1 || *limit > maxAuditLimit {
		return fmt.Errorf("%w: --limit must be between 1 and %d, got %d", errUsage, maxAuditLimit, *limit)
	}
	files, err := selectStores(*dataDir, *network)
	if err != nil {
		return err
	}
	rows := []auditRow{}
	unreadable := 0
	for _, f := range files {
		name, evs, err := readAudit(f.Path, *limit)
		if err != nil {
			printf(stderr, "hostlease-gc audit: network %s: %s", f.Network, storeErr(f.Network, err))
			unreadable++
			continue
		}
		if name == "" {
			name = f.Network
		}
		for _, ev := range evs {
			rows = append(rows, auditRow{Network: name, AuditEvent: ev})
		}
	}
	var failed error
	if unreadable > 0 {
		failed = fmt.Errorf("%d store(s) could not be read", unreadable)
	}
	if *out == "json" {
		if err := writeJSON(stdout, rows); err != nil {
			return err
		}
		return failed
	}
	var t [][]string
	for _, r := range rows {
		ip := "-"
		if r.IP.IsValid() {
			ip = r.IP.String()
		}
		t = append(t, []string{r.Time.UTC().Format(time.RFC3339), r.Network, r.Action, ip, shortID(r.ContainerID), orDash(r.IfName),
			orDash(r.Pod), orDash(r.By), orDash(r.Reason)})
	}
	if err := table(stdout, []string{"TIME", "NETWORK", "ACTION", "IP", "SANDBOX", "IFNAME", "POD", "BY", "REASON"}, t); err != nil {
		return err
	}
	return failed
}

func readAudit(path string, limit int) (string, []allocator.AuditEvent, error) {
	st, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: cliLockTimeout})
	if err != nil {
		return "", nil, err
	}
	defer st.Close()
	var name string
	var evs []allocator.AuditEvent
	err = st.View(func(tx *store.Tx) error {
		name = tx.Network()
		evs, err = tx.AuditLog(limit)
		return err
	})
	return name, evs, err
}
