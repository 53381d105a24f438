package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/gc"
)

// damagedEntry is a damaged record in `list -o json`, beside the records:
// state "damaged", the address and why its value does not decode.
type damagedEntry struct {
	IP          string `json:"ip"` // "" when the key is damaged too
	Network     string `json:"network"`
	State       string `json:"state"`
	Error       string `json:"error"`
	ContainerID string `json:"containerID,omitempty"` // owner as far as readable: a hint
	IfName      string `json:"ifName,omitempty"`
}

func cmdList(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("list", stderr)
	dataDir := dataDirFlag(fs)
	network := fs.String("network", "", "only this network")
	out := outputFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	files, err := selectStores(*dataDir, *network)
	if err != nil {
		return err
	}
	var views []*storeView
	unreadable, damaged := 0, 0
	for _, f := range files {
		v, err := readStore(f)
		if err != nil {
			printf(stderr, "hostlease-gc list: network %s: %s", f.Network, storeErr(f.Network, err))
			unreadable++
			continue
		}
		views = append(views, v)
		damaged += len(v.Damaged)
	}
	var result error
	switch {
	case unreadable > 0:
		result = fmt.Errorf("%d store(s) could not be read", unreadable)
	case damaged > 0:
		result = damagedSummary(damaged)
	}
	if *out == "json" {
		all := []any{}
		for _, v := range views {
			for _, r := range v.Records {
				all = append(all, r)
			}
			for _, d := range v.Damaged {
				ip := ""
				if d.IP.IsValid() {
					ip = d.IP.String()
				}
				all = append(all, damagedEntry{IP: ip, Network: v.Network, State: "damaged", Error: damagedErr(d),
					ContainerID: d.ContainerID, IfName: d.IfName})
			}
		}
		if err := writeJSON(stdout, all); err != nil {
			return err
		}
		return result
	}
	now := time.Now()
	header := []string{"NETWORK", "IP", "POD", "SANDBOX", "IFNAME", "STATE", "AGE", "SANDBOX-STATE", "MISSES"}
	if damaged > 0 {
		header = append(header, "DAMAGE")
	}
	var t [][]string
	for _, v := range views {
		for _, r := range v.Records {
			row := []string{r.Network, r.IP.String(), orDash(r.PodRef()), shortID(r.ContainerID), orDash(r.IfName),
				string(r.State), age(now.Sub(r.Created)), orDash(r.Obs.SandboxState), strconv.Itoa(r.Obs.Misses)}
			if damaged > 0 {
				row = append(row, "-")
			}
			t = append(t, row)
		}
		for _, d := range v.Damaged {
			t = append(t, []string{v.Network, damagedIP(d), "-", shortID(d.ContainerID), orDash(d.IfName), "DAMAGED", "-", "-", "-",
				damagedErr(d)})
		}
	}
	if err := table(stdout, header, t); err != nil {
		return err
	}
	return result
}

// selectStores returns the stores to act on: one network's, or all. The data
// dir must exist: a mistyped path is an error, never an empty answer. A
// network's store is found where the plugin puts it (store.FilePath),
// not by guessing a name back from file names.
func selectStores(dataDir, network string) ([]gc.StoreFile, error) {
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
		return []gc.StoreFile{{Network: network, Path: path}}, nil
	}
	return gc.FindStores(dataDir)
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return orDash(id)
}
