package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("status", stderr)
	dataDir := dataDirFlag(fs)
	out := outputFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	files, err := selectStores(*dataDir, "")
	if err != nil {
		return err
	}
	rows := []gc.PoolRow{}
	unreadable, damaged := 0, 0
	for _, f := range files {
		snap, err := readStore(f)
		if err != nil {
			unreadable++
			rows = append(rows, gc.PoolRow{Network: f.Network, RangeSet: -1, Error: storeErr(f.Network, err)})
			continue
		}
		for _, u := range snap.Usage {
			row := gc.PoolRow{Network: snap.Network, RangeSet: u.RangeSet, Ranges: u.Desc, Size: json.Number(u.Size.String()), Used: u.Used,
				Free: json.Number(u.Free().String()), Exhaustions: snap.Exhaustions[u.RangeSet].Count}
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
				if gc.IsLeakCandidate(r.Obs) {
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
			rows = append(rows, gc.PoolRow{Network: snap.Network, RangeSet: -1, Used: len(snap.Records) + len(snap.Damaged),
				Damaged: len(snap.Damaged), Note: note})
		}
		for _, d := range snap.Damaged {
			damaged++
			rows = append(rows, gc.PoolRow{Network: snap.Network, RangeSet: snap.rangeSetOf(d.IP), IP: damagedIP(d), Damage: damagedErr(d)})
		}
	}
	var failed error
	switch {
	case unreadable > 0:
		failed = fmt.Errorf("%d store(s) could not be read (ERROR rows)", unreadable)
	case damaged > 0:
		failed = damagedSummary(damaged)
	}
	if *out == "json" {
		if err := writeJSON(stdout, rows); err != nil {
			return err
		}
		return failed
	}
	if len(rows) == 0 {
		printf(stdout, "no stores under %s", *dataDir)
		return nil
	}
	var t [][]string
	for _, r := range rows {
		switch {
		case r.Error != "":
			t = append(t, []string{r.Network, "-", "-", "-", "-", "-", "-", "-", "-", "-", "ERROR: " + r.Error})
		case r.Damage != "":
			set := "-"
			if r.RangeSet >= 0 {
				set = strconv.Itoa(r.RangeSet)
			}
			t = append(t, []string{r.Network, set, "-", "-", "-", "-", "-", "-", "-", "-", "DAMAGED record " + r.IP + ": " + r.Damage})
		case r.Note != "":
			t = append(t, []string{r.Network, "-", "-", "-", strconv.Itoa(r.Used), "-", "-", "-", "-", strconv.Itoa(r.Damaged), r.Note})
		default:
			t = append(t, []string{r.Network, strconv.Itoa(r.RangeSet), r.Ranges, r.Size.String(), strconv.Itoa(r.Used),
				r.Free.String(), strconv.Itoa(r.Pending), strconv.Itoa(r.LeakCandidates), strconv.FormatUint(r.Exhaustions, 10), strconv.Itoa(r.Damaged), ""})
		}
	}
	if err := table(stdout, []string{"NETWORK", "SET", "RANGES", "SIZE", "USED", "FREE", "PENDING", "CANDIDATES", "EXHAUSTIONS", "DAMAGED", ""}, t); err != nil {
		return err
	}
	return failed
}
