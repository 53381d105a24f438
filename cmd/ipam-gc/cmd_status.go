package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/daemon"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

func statusCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "status",
		Short: "pools per network: size, used, free, pending, leak candidates",
		Long: "Pools per network and range set: size, used, free, pending, leak candidates, exhaustions, damaged records.\n" +
			"A store that cannot be read is an ERROR row, one that cannot be written a READ-ONLY note (exit status 1 for both).",
		Example: `  hostlease-gc status
  hostlease-gc status -d /var/lib/cni/networks -o json
  hostlease-gc status --no-headers -o wide`,
		Args: noArgs,
	}
	dataDir := dataDirFlag(c)
	out := outputFlags(c)
	lockTimeout := lockTimeoutFlag(c)
	c.RunE = func(*cobra.Command, []string) error {
		if err := out.check(); err != nil {
			return err
		}
		rows, failed, err := findPools(*dataDir, *lockTimeout)
		if err != nil {
			return err
		}
		if err := out.render(stdout, stderr, rows, len(rows), poolTable(rows), "stores", *dataDir); err != nil {
			return err
		}
		return failed
	}
	return c
}

// findPools reads every store under dataDir into status rows. failed is the
// error the command ends with (an unreadable or unwritable store, damaged
// records) once the rows are printed; err means nothing can be shown.
func findPools(dataDir string, lockTimeout time.Duration) (rows []daemon.PoolRow, failed, err error) {
	files, err := selectStores(dataDir, "")
	if err != nil {
		return nil, nil, err
	}
	rows = []daemon.PoolRow{}
	unreadable, unwritable, damaged := 0, 0, 0
	for _, f := range files {
		snap, err := readStore(f, lockTimeout)
		if err != nil {
			unreadable++
			rows = append(rows, daemon.PoolRow{Network: f.Network, RangeSet: -1, Error: storeErr(f.Network, err)})
			continue
		}
		ro := ""
		if werr := storeWritable(f.Path); werr != nil {
			unwritable++
			ro = werr.Error()
		}
		damaged += len(snap.Damaged)
		rows = append(rows, poolRows(snap, ro)...)
	}
	switch {
	case unreadable > 0:
		failed = fmt.Errorf("%d store(s) could not be read (ERROR rows)", unreadable)
	case unwritable > 0:
		failed = fmt.Errorf("%d store(s) cannot be written (READ-ONLY): the plugin's ADD and DEL fail on them", unwritable)
	case damaged > 0:
		failed = damagedSummary(damaged)
	}
	return rows, failed, nil
}

// poolRows are one readable store's rows: one per range set (or one saying
// its ranges are unknown), then one per damaged record. ro, when not empty,
// is why the store cannot be written; every row of the store carries it.
func poolRows(snap *storeView, ro string) []daemon.PoolRow {
	var rows []daemon.PoolRow
	for _, u := range snap.Usage {
		row := daemon.PoolRow{Network: snap.Network, RangeSet: u.RangeSet, Ranges: u.Desc, Size: u.Size.String(), Used: u.Used,
			Free: u.Free().String(), Exhaustions: snap.Exhaustions[u.RangeSet].Count, ReadOnly: ro}
		for _, d := range snap.Damaged {
			if d.IP.IsValid() && snap.rangeSetOf(d.IP) == u.RangeSet {
				row.Damaged++
			}
		}
		for _, r := range snap.Records {
			if r.RangeSet != u.RangeSet {
				continue
			}
			if r.State == allocator.StatePending {
				row.Pending++
			}
			if reclaim.IsLeakCandidate(r.Obs) {
				row.LeakCandidates++
			}
		}
		rows = append(rows, row)
	}
	if len(snap.Usage) == 0 {
		note := "ranges unknown until the plugin's next ADD on this network"
		if snap.RangesErr != nil {
			note = "ranges unknown (" + snap.RangesErr.Error() + ") until the plugin's next ADD on this network"
		}
		rows = append(rows, daemon.PoolRow{Network: snap.Network, RangeSet: -1, Used: len(snap.Records) + len(snap.Damaged),
			Damaged: len(snap.Damaged), Note: note, ReadOnly: ro})
	}
	for _, d := range snap.Damaged {
		rows = append(rows, daemon.PoolRow{Network: snap.Network, RangeSet: snap.rangeSetOf(d.IP), IP: damagedIP(d), Damage: damagedErr(d), ReadOnly: ro})
	}
	return rows
}

// poolTable is status's table. Wide adds nothing hidden: every column shows
// in both (status has no long values to shorten).
func poolTable(rows []daemon.PoolRow) tableFunc {
	return func(bool) ([]string, [][]string) {
		var t [][]string
		for _, r := range rows {
			note := r.Note
			if r.ReadOnly != "" {
				note = "READ-ONLY: " + r.ReadOnly
				if r.Note != "" {
					note += "; " + r.Note
				}
			}
			switch {
			case r.Error != "":
				t = append(t, []string{r.Network, "-", "-", "-", "-", "-", "-", "-", "-", "-", "ERROR: " + r.Error})
			case r.Damage != "":
				set := "-"
				if r.RangeSet >= 0 {
					set = strconv.Itoa(r.RangeSet)
				}
				t = append(t, []string{r.Network, set, "-", "-", "-", "-", "-", "-", "-", "-", "DAMAGED record " + r.IP + ": " + r.Damage})
			case r.RangeSet < 0:
				t = append(t, []string{r.Network, "-", "-", "-", strconv.Itoa(r.Used), "-", "-", "-", "-", strconv.Itoa(r.Damaged), note})
			default:
				t = append(t, []string{r.Network, strconv.Itoa(r.RangeSet), r.Ranges, r.Size, strconv.Itoa(r.Used),
					r.Free, strconv.Itoa(r.Pending), strconv.Itoa(r.LeakCandidates), strconv.FormatUint(r.Exhaustions, 10), strconv.Itoa(r.Damaged), note})
			}
		}
		return []string{"NETWORK", "SET", "RANGES", "SIZE", "USED", "FREE", "PENDING", "CANDIDATES", "EXHAUSTIONS", "DAMAGED", "NOTE"}, t
	}
}
