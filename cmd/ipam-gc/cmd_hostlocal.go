package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

// hostLocalFlags registers the flags shared by import and export.
func hostLocalFlags(name string, stderr io.Writer) (f *flag.FlagSet, dataDir, network, hlDir *string) {
	f = flagSet(name, stderr)
	dataDir = f.String("data-dir", gc.DefaultDataDir, "directory holding the <network>.db stores")
	network = f.String("network", "", "the network name (required)")
	hlDir = f.String("host-local-dir", allocator.DefaultHostLocalDir, "host-local's data dir (its state is <dir>/<network>/)")
	return f, dataDir, network, hlDir
}

// cmdImport imports host-local's state for a network into its store. Addresses
// already in the store are kept as they are.
func cmdImport(args []string, stdout, stderr io.Writer) error {
	fs, dataDir, network, hlDir := hostLocalFlags("import", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("%w: --network is required", errUsage)
	}
	src := allocator.HostLocalDir(*hlDir, *network)
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("no host-local state: %w", err)
	}
	st, err := allocator.Open(allocator.StorePath(*dataDir, *network), allocator.OpenOptions{Create: true, LockTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	n := 0
	err = st.Update(func(tx *allocator.Tx) error {
		sets, err := tx.RangeSets()
		if err != nil {
			return err
		}
		if err := tx.SetNetwork(*network); err != nil {
			return err
		}
		n, err = allocator.ImportHostLocal(tx, src, *network, sets, time.Now())
		if err != nil {
			return err
		}
		return tx.MarkMigrated(time.Now())
	})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "imported %d reservation(s) from %s into %s\n", n, src, st.Path())
	return err
}

// cmdExport writes a store back in host-local's format, for rolling back.
func cmdExport(args []string, stdout, stderr io.Writer) error {
	fs, dataDir, network, hlDir := hostLocalFlags("export", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("%w: --network is required", errUsage)
	}
	st, err := allocator.Open(allocator.StorePath(*dataDir, *network), allocator.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	dst := allocator.HostLocalDir(*hlDir, *network)
	n := 0
	err = st.View(func(tx *allocator.Tx) error {
		n, err = allocator.ExportHostLocal(tx, dst)
		return err
	})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "exported %d reservation(s) to %s\n", n, dst)
	return err
}
