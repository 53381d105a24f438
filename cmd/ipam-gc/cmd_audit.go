package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// maxAuditLimit is the most entries a store keeps (its audit log is bounded),
// so the most --limit can mean.
const maxAuditLimit = 100000

// auditCmd prints the newest entries of each store's audit log: releases,
// reclaims, manual releases, imports, rebuilds, index repairs.
func auditCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "the stores' audit logs: releases, reclaims, imports, rebuilds, repairs",
		Long:  "The newest entries of each store's audit log: releases, reclaims, manual releases, imports, rebuilds, index repairs.",
		Example: `  hostlease-gc audit -n cbr0 --limit 20
  hostlease-gc audit -o json | jq '.[] | select(.action == "reclaim")'`,
		Args: noArgs,
	}
	dataDir := dataDirFlag(c)
	network := networkFlag(c, "only this network")
	limit := c.Flags().IntP("limit", "l", 50, fmt.Sprintf("newest entries to show per network (1..%d)", maxAuditLimit))
	out := outputFlags(c)
	lockTimeout := lockTimeoutFlag(c)
	c.RunE = func(*cobra.Command, []string) error {
		if err := out.check(); err != nil {
			return err
		}
		if *limit < 1 || *limit > maxAuditLimit {
			return fmt.Errorf("%w: --limit must be between 1 and %d, got %d", errUsage, maxAuditLimit, *limit)
		}
		rows, failed, err := findAudit(*dataDir, *network, *limit, *lockTimeout, stderr)
		if err != nil {
			return err
		}
		if err := out.render(stdout, stderr, rows, len(rows), auditTable(rows), "audit entries", *dataDir); err != nil {
			return err
		}
		return failed
	}
	return c
}

// findAudit reads the newest limit entries of each selected store.
func findAudit(dataDir, network string, limit int, lockTimeout time.Duration, stderr io.Writer) (rows []daemon.AuditRow, failed, err error) {
	files, err := selectStores(dataDir, network)
	if err != nil {
		return nil, nil, err
	}
	rows = []daemon.AuditRow{}
	unreadable := 0
	for _, f := range files {
		name, evs, err := readAudit(f.Path, limit, lockTimeout)
		if err != nil {
			printf(stderr, "hostlease-gc audit: network %s: %s", f.Network, storeErr(f.Network, err))
			unreadable++
			continue
		}
		if name == "" {
			name = f.Network
		}
		for _, ev := range evs {
			rows = append(rows, daemon.AuditRow{Network: name, AuditEvent: ev})
		}
	}
	if unreadable > 0 {
		failed = fmt.Errorf("%d store(s) could not be read", unreadable)
	}
	return rows, failed, nil
}

// auditTable is audit's table; wide shows whole sandbox IDs and pod UIDs.
func auditTable(rows []daemon.AuditRow) tableFunc {
	return func(wide bool) ([]string, [][]string) {
		header := []string{"TIME", "NETWORK", "ACTION", "IP", "SANDBOX", "IFNAME", "POD", "BY", "REASON"}
		id := shortID
		if wide {
			header = append(header, "POD-UID")
			id = orDash
		}
		var t [][]string
		for _, r := range rows {
			ip := "-"
			if r.IP.IsValid() {
				ip = r.IP.String()
			}
			row := []string{r.Time.UTC().Format(time.RFC3339), r.Network, r.Action, ip, id(r.ContainerID), r.IfName, r.Pod, r.By, r.Reason}
			if wide {
				row = append(row, r.PodUID)
			}
			t = append(t, row)
		}
		return header, t
	}
}

func readAudit(path string, limit int, lockTimeout time.Duration) (string, []allocator.AuditEvent, error) {
	st, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: lockTimeout})
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
