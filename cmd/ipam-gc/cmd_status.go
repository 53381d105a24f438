package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

// poolRow is one range set of one network, as `status` shows it.
type poolRow struct {
	Network    string  `json:"network"`
	RangeSet   int     `json:"rangeSet"`
	Ranges     string  `json:"ranges"`
	Size       float64 `json:"size"`
	Used       int     `json:"used"`
	Free       float64 `json:"free"`
	Pending    int     `json:"pending"`
	Candidates int     `json:"leakCandidates"`
	Exhausted  uint64  `json:"exhaustions"`
	Error      string  `json:"error,omitempty"`
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("status", stderr)
	dataDir := fs.String("data-dir", gc.DefaultDataDir, "directory holding the <network>.db stores")
	out := outputFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	files, err := gc.FindStores(*dataDir)
	if err != nil {
		return err
	}
	rows := []poolRow{}
	for _, f := range files {
		snap, err := gc.ReadSnapshot(f.Path)
		if err != nil {
			rows = append(rows, poolRow{Network: f.Network, RangeSet: -1, Error: err.Error()})
			continue
		}
		for _, u := range snap.Usage {
			size, _ := u.Size.Float64()
			row := poolRow{Network: f.Network, RangeSet: u.RangeSet, Ranges: u.Desc, Size: size, Used: u.Used, Free: u.Free(),
				Exhausted: snap.Exhaustions[u.RangeSet].Count}
			for _, r := range snap.Records {
				if r.RangeSet != u.RangeSet {
					continue
				}
				if r.State == allocator.StatePending {
					row.Pending++
				}
				if r.Obs.Misses > 0 {
					row.Candidates++
				}
			}
			rows = append(rows, row)
		}
		if len(snap.Usage) == 0 {
			rows = append(rows, poolRow{Network: f.Network, RangeSet: -1, Used: len(snap.Records), Error: "no ADD has recorded this network's ranges yet"})
		}
	}
	if *out == "json" {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(stdout, "no stores under %s\n", *dataDir)
		return err
	}
	var t [][]string
	for _, r := range rows {
		if r.Error != "" {
			t = append(t, []string{r.Network, "-", "-", "-", strconv.Itoa(r.Used), "-", "-", "-", "-", "ERROR: " + r.Error})
			continue
		}
		t = append(t, []string{r.Network, strconv.Itoa(r.RangeSet), r.Ranges, fmt.Sprintf("%.0f", r.Size), strconv.Itoa(r.Used),
			fmt.Sprintf("%.0f", r.Free), strconv.Itoa(r.Pending), strconv.Itoa(r.Candidates), strconv.FormatUint(r.Exhausted, 10), ""})
	}
	return table(stdout, []string{"NETWORK", "SET", "RANGES", "SIZE", "USED", "FREE", "PENDING", "CANDIDATES", "EXHAUSTIONS", ""}, t)
}
