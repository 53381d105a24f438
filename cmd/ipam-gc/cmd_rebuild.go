package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// rebuildCmd sets a network's store aside and rebuilds it with
// daemon.RebuildStore, the daemon's engine: from the runtime's sandboxes and from
// whatever of the old store can still be read (records that decode are kept,
// damaged ones keep their addresses reserved).
//   - a store bbolt cannot open, or one holding damaged records, is rebuilt
//     as asked;
//   - one with a damaged page needs --force (the plugin still serves from its
//     readable pages; the addresses whose records only the damaged page
//     holds stay reserved for nobody, as the taken bitmap shows them, until
//     the daemon's rules without proof free them);
//   - a healthy store needs --force.
//
// Environment errors (permissions, read-only, no space...) are never a
// reason to rebuild: they are reported as they are.
func rebuildCmd(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "rebuild --network N",
		Short: "set a damaged store aside and rebuild it from CRI and what still decodes",
		Long: "Set a network's store aside and rebuild it from the runtime's sandboxes and whatever of the old store can\n" +
			"still be read. A store bbolt cannot open, or one holding damaged records, is rebuilt as asked; one with a damaged\n" +
			"page, or a healthy one, needs --force. Environment errors (permissions, read-only, no space) are never rebuilt.",
		Example: `  hostlease-gc rebuild -n cbr0
  hostlease-gc rebuild -n cbr0 --force --cri-endpoint unix:///run/crio/crio.sock`,
		Args: noArgs,
	}
	dataDir := dataDirFlag(c)
	network := networkFlag(c, "the network whose store to rebuild (required)")
	endpoint := c.Flags().String("cri-endpoint", daemon.DefaultCRIEndpoint, "CRI runtime endpoint (unix socket)")
	force := c.Flags().BoolP("force", "f", false, "rebuild a store that is healthy or has a damaged page (addresses only that page records stay reserved for nobody)")
	c.RunE = func(*cobra.Command, []string) error {
		if *network == "" {
			return fmt.Errorf("%w: --network is required", errUsage)
		}
		if err := checkCRIEndpoint(*endpoint); err != nil {
			return err
		}
		f, view, sets, err := findRebuild(*dataDir, *network, *force)
		if err != nil {
			return err
		}
		return applyRebuild(stdout, f, view, sets, *endpoint, *force)
	}
	return c
}

// findRebuild reads the network's store and decides whether it may be
// rebuilt: it returns the store, what of it could be read (nil if nothing)
// and its range sets, or why not.
func findRebuild(dataDir, network string, force bool) (daemon.StoreFile, *storeView, []allocator.StoredRangeSet, error) {
	files, err := selectStores(dataDir, network)
	if err != nil {
		return daemon.StoreFile{}, nil, nil, err
	}
	f := files[0]
	view, readErr := readStore(f, cliLockTimeout)
	switch {
	case readErr == nil && len(view.Damaged) == 0 && !force:
		return f, nil, nil, fmt.Errorf("store %s is readable (%d records); pass --force to rebuild it anyway (no record is damaged)", f.Path, len(view.Records))
	case readErr == nil:
		return f, view, view.RangeSets, nil
	case errors.Is(readErr, store.ErrPageDamaged) && !force:
		// The plugin still serves from the pages it can read: a rebuild
		// cannot tell who owns what only the damaged page records.
		return f, nil, nil, fmt.Errorf("store %s is damaged (%v); pass --force to set it aside and rebuild it from CRI and its readable pages (owners recorded only on the damaged page are lost; their addresses stay reserved for nobody until the daemon frees them)", f.Path, readErr)
	case store.IsDamage(readErr):
		// RebuildStore reads the range sets from the old store if it can.
		return f, nil, nil, nil
	}
	return f, nil, nil, fmt.Errorf("not rebuilding: %w (not damage: fix the cause)", readErr)
}

// applyRebuild lists the runtime's sandboxes and rebuilds f with them.
func applyRebuild(stdout io.Writer, f daemon.StoreFile, view *storeView, sets []allocator.StoredRangeSet, endpoint string, force bool) error {
	cri, err := daemon.DialCRI(endpoint)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer cri.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	committed := 0
	if view != nil {
		for _, r := range view.Records {
			if r.State == allocator.StateCommitted {
				committed++
			}
		}
	}
	crView, sandboxes := daemon.ListView(ctx, cri, committed, time.Now())
	if !crView.Complete {
		return fmt.Errorf("not rebuilding: %s", crView.Why)
	}
	when := daemon.RebuildDamaged
	if force {
		when = daemon.RebuildAlways
	}
	aside, n, err := daemon.RebuildStore(ctx, cri, f.Path, f.Network, sandboxes, sets, time.Now().UTC(), when, allocator.ByCLI("rebuild"))
	if err != nil {
		return err
	}
	printf(stdout, "rebuilt %s with %d record(s) from %d sandbox(es) and what could be read of the old store; previous store kept as %s",
		f.Path, n, len(sandboxes), aside)
	return nil
}
