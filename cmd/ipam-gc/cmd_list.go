package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

func listCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "list",
		Short: "every allocation: IP, pod, sandbox, state, age",
		Long: "Every allocation of every store (or of one network): address, pod, sandbox, interface, state, age,\n" +
			"and what the daemon last saw of its sandbox. Damaged records are listed as DAMAGED (exit status 3).",
		Example: `  hostlease-gc list
  hostlease-gc list -n cbr0 -o wide
  hostlease-gc list -o json | jq -r '.[] | select(.state == "pending") | .ip'`,
		Args: noArgs,
	}
	dataDir := dataDirFlag(c)
	network := networkFlag(c, "only this network")
	out := outputFlags(c)
	lockTimeout := lockTimeoutFlag(c)
	c.RunE = func(*cobra.Command, []string) error {
		if err := out.check(); err != nil {
			return err
		}
		views, failed, err := findViews(*dataDir, *network, *lockTimeout, stderr)
		if err != nil {
			return err
		}
		rows := listRows(views)
		if err := out.render(stdout, stderr, rows, len(rows), listTable(views), "allocations", *dataDir); err != nil {
			return err
		}
		return failed
	}
	return c
}

// findViews reads the selected stores. An unreadable one is reported on
// stderr and makes failed an error; damaged records make it errDamaged.
func findViews(dataDir, network string, lockTimeout time.Duration, stderr io.Writer) (views []*storeView, failed, err error) {
	files, err := selectStores(dataDir, network)
	if err != nil {
		return nil, nil, err
	}
	unreadable, damaged := 0, 0
	for _, f := range files {
		v, err := readStore(f, lockTimeout)
		if err != nil {
			printf(stderr, "hostlease-gc list: network %s: %s", f.Network, storeErr(f.Network, err))
			unreadable++
			continue
		}
		views = append(views, v)
		damaged += len(v.Damaged)
	}
	switch {
	case unreadable > 0:
		failed = fmt.Errorf("%d store(s) could not be read", unreadable)
	case damaged > 0:
		failed = damagedSummary(damaged)
	}
	return views, failed, nil
}

// listRows are list's JSON rows: the records, then a DamagedRow per record
// that does not decode.
func listRows(views []*storeView) []any {
	all := []any{}
	for _, v := range views {
		for _, r := range v.Records {
			all = append(all, daemon.NewListRow(r))
		}
		for _, d := range v.Damaged {
			ip := ""
			if d.IP.IsValid() {
				ip = d.IP.String()
			}
			all = append(all, daemon.DamagedRow{IP: ip, Network: v.Network, State: daemon.DamagedState, Error: damagedErr(d),
				ContainerID: d.ContainerID, IfName: d.IfName})
		}
	}
	return all
}

// listTable is list's table; wide shows whole sandbox IDs, the pod UID and
// the netns path.
func listTable(views []*storeView) tableFunc {
	return func(wide bool) ([]string, [][]string) {
		now := time.Now()
		id := shortID
		if wide {
			id = orDash
		}
		header := []string{"NETWORK", "IP", "POD", "SANDBOX", "IFNAME", "STATE", "AGE", "SANDBOX-STATE", "MISSES"}
		if wide {
			header = append(header, "POD-UID", "NETNS")
		}
		header = append(header, "DAMAGE")
		var t [][]string
		for _, v := range views {
			for _, r := range v.Records {
				row := []string{r.Network, r.IP.String(), r.PodRef(), id(r.ContainerID), r.IfName,
					string(r.State), age(now.Sub(r.Created)), r.Obs.SandboxState, strconv.Itoa(r.Obs.Misses)}
				if wide {
					row = append(row, r.PodUID, r.Netns)
				}
				t = append(t, append(row, "-"))
			}
			for _, d := range v.Damaged {
				row := []string{v.Network, damagedIP(d), "-", id(d.ContainerID), d.IfName, "DAMAGED", "-", "-", "-"}
				if wide {
					row = append(row, "-", "-")
				}
				t = append(t, append(row, damagedErr(d)))
			}
		}
		return header, t
	}
}

// selectStores returns the stores to act on: one network's, or all. The data
// dir must exist: a mistyped path is an error, never an empty answer. A
// network's store is found where the plugin puts it (store.FilePath),
// not by guessing a name back from file names.
func selectStores(dataDir, network string) ([]daemon.StoreFile, error) {
	if network != "" {
		if err := checkNetwork(network); err != nil {
			return nil, err
		}
	}
	if err := checkDir("--data-dir", dataDir); err != nil {
		return nil, err
	}
	if network != "" {
		path := store.FilePath(dataDir, network)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no store for network %q under %s", network, dataDir)
		}
		return []daemon.StoreFile{{Network: network, Path: path}}, nil
	}
	return daemon.FindStores(dataDir)
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return orDash(id)
}
