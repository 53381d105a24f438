package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

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
	all := []*allocator.Record{}
	var firstErr error
	unreadable := 0
	for _, f := range files {
		snap, err := gc.ReadSnapshot(f.Path)
		if err != nil {
			printf(stderr, "hostlease-gc list: network %s: %v", f.Network, err)
			unreadable++
			firstErr = fmt.Errorf("%d store(s) could not be read", unreadable)
			continue
		}
		all = append(all, snap.Records...)
	}
	if *out == "json" {
		if err := writeJSON(stdout, all); err != nil {
			return err
		}
		return firstErr
	}
	now := time.Now()
	var t [][]string
	for _, r := range all {
		t = append(t, []string{r.Network, r.IP.String(), orDash(r.PodRef()), shortID(r.ContainerID), orDash(r.IfName),
			string(r.State), age(now.Sub(r.Created)), orDash(r.Obs.SandboxState), strconv.Itoa(r.Obs.Misses)})
	}
	if err := table(stdout, []string{"NETWORK", "IP", "POD", "SANDBOX", "IFNAME", "STATE", "AGE", "SANDBOX-STATE", "MISSES"}, t); err != nil {
		return err
	}
	return firstErr
}

// selectStores returns the stores to act on: one network's, or all. The data
// dir must exist: a mistyped path is an error, never an empty answer.
func selectStores(dataDir, network string) ([]gc.StoreFile, error) {
	if network != "" {
		if err := checkNetwork(network); err != nil {
			return nil, err
		}
	}
	if err := checkDir("--data-dir", dataDir); err != nil {
		return nil, err
	}
	files, err := gc.FindStores(dataDir)
	if err != nil {
		return nil, err
	}
	if network == "" {
		return files, nil
	}
	for _, f := range files {
		if f.Network == network {
			return []gc.StoreFile{f}, nil
		}
	}
	return nil, fmt.Errorf("no store for network %q under %s", network, dataDir)
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return orDash(id)
}
