package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

// cmdRebuild sets a network's store aside and rebuilds it from the runtime's
// READY sandboxes. Without --force it only acts on an unreadable store.
func cmdRebuild(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("rebuild", stderr)
	dataDir := dataDirFlag(fs)
	network := fs.String("network", "", "the network whose store to rebuild (required)")
	endpoint := fs.String("cri-endpoint", gc.DefaultCRIEndpoint, "CRI runtime endpoint (unix socket)")
	force := fs.Bool("force", false, "rebuild even though the store is readable (pending ADDs in flight are forgotten)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("%w: --network is required", errUsage)
	}
	if err := checkNetwork(*network); err != nil {
		return err
	}
	if *endpoint == "" {
		return fmt.Errorf("%w: --cri-endpoint must not be empty", errUsage)
	}
	if err := checkDir("--data-dir", *dataDir); err != nil {
		return err
	}
	path := allocator.StorePath(*dataDir, *network)
	snap, err := gc.ReadSnapshot(path)
	switch {
	case err == nil && !*force:
		return fmt.Errorf("store %s is readable (%d records); pass --force to rebuild it anyway", path, len(snap.Records))
	case err != nil && !errors.Is(err, allocator.ErrStoreUnreadable):
		return err
	}
	var sets []allocator.StoredRangeSet
	if snap != nil {
		sets = snap.RangeSets
	}
	cri, err := gc.DialCRI(*endpoint)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer cri.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	view, sandboxes := gc.ListView(ctx, cri, 0, time.Now())
	if !view.Complete {
		return fmt.Errorf("not rebuilding: %s", view.Why)
	}
	aside, n, err := gc.RebuildStore(ctx, cri, path, *network, sandboxes, sets, time.Now().UTC())
	if err != nil {
		return err
	}
	printf(stdout, "rebuilt %s with %d record(s) from %d sandbox(es); previous store kept as %s", path, n, len(sandboxes), aside)
	return nil
}
