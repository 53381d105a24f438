package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/internal/trustfs"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// hostLocalArgs are the flags shared by import and export, checked.
type hostLocalArgs struct {
	dataDir, network string
	// hlBase is host-local's data dir (its state is hlBase/<network>/);
	// hlGiven says --host-local-dir named it rather than the plugin's rule.
	hlBase  string
	hlGiven bool
}

// hostLocalFlags registers import's and export's flags; check turns them
// into hostLocalArgs.
func hostLocalFlags(c *cobra.Command) func() (*hostLocalArgs, error) {
	dataDir := dataDirFlag(c)
	network := networkFlag(c, "the network name (required)")
	hlDir := c.Flags().String("host-local-dir", "", "host-local's data dir, holding <dir>/<network>/ (default: the --data-dir when it is not "+
		allocator.DefaultStoreDir+", as the plugin's ipam dataDir puts both there; otherwise "+allocator.DefaultHostLocalDir+")")
	return func() (*hostLocalArgs, error) {
		if *network == "" {
			return nil, fmt.Errorf("%w: --network is required", errUsage)
		}
		if err := checkNetwork(*network); err != nil {
			return nil, err
		}
		if err := checkDir("--data-dir", *dataDir); err != nil {
			return nil, err
		}
		a := &hostLocalArgs{dataDir: *dataDir, network: *network, hlBase: *hlDir, hlGiven: c.Flags().Changed("host-local-dir")}
		if a.hlGiven {
			if err := checkDir("--host-local-dir", a.hlBase); err != nil {
				return nil, err
			}
		} else {
			a.hlBase = allocator.HostLocalBaseFor(a.dataDir)
		}
		return a, nil
	}
}

func importCmd(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "import --network N",
		Short: "import host-local state into a store",
		Long:  "Import host-local's reservations of a network into its store (migration). Addresses already in the store are kept as they are.",
		Example: `  hostlease-gc import -n cbr0
  hostlease-gc import -n cbr0 --host-local-dir /var/lib/cni/networks`,
		Args: noArgs,
	}
	args := hostLocalFlags(c)
	c.RunE = func(*cobra.Command, []string) error {
		a, err := args()
		if err != nil {
			return err
		}
		return runImport(a, stdout)
	}
	return c
}

func exportCmd(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "export --network N",
		Short: "write a store back as host-local files (rollback)",
		Long:  "Write a network's store back in host-local's format (rollback), into the directory host-local reads with the same ipam config.",
		Example: `  hostlease-gc export -n cbr0
  hostlease-gc export -n cbr0 --host-local-dir /var/lib/cni/networks`,
		Args: noArgs,
	}
	args := hostLocalFlags(c)
	c.RunE = func(*cobra.Command, []string) error {
		a, err := args()
		if err != nil {
			return err
		}
		return runExport(a, stdout)
	}
	return c
}

// runImport imports host-local's state for a network into its store. Addresses
// already in the store are kept as they are.
func runImport(a *hostLocalArgs, stdout io.Writer) error {
	src := allocator.HostLocalDir(a.hlBase, a.network)
	// Checked before the store is opened (and created): host-local state
	// that is a symlink or another user's is refused (trustfs's contract).
	d, err := trustfs.OpenDir(src)
	if trustfs.IsUntrusted(err) {
		return fmt.Errorf("host-local state for network %s: %w", a.network, err)
	}
	if err != nil {
		return fmt.Errorf("no host-local state for network %s: %s: %w (host-local's data dir is --host-local-dir)", a.network, src, unwrapPathErr(err))
	}
	d.Close()
	st, err := store.Open(store.FilePath(a.dataDir, a.network), store.OpenOptions{Create: true, LockTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	n := 0
	err = st.Update(func(tx *store.Tx) error {
		sets, err := tx.RangeSets()
		if err != nil {
			return err
		}
		if err := tx.SetNetwork(a.network); err != nil {
			return err
		}
		n, err = allocator.ImportHostLocal(tx, src, a.network, sets, time.Now())
		if err != nil {
			return err
		}
		return tx.MarkMigrated(time.Now())
	})
	if err != nil {
		return err
	}
	printf(stdout, "imported %d reservation(s) from %s into %s", n, src, st.Path())
	return nil
}

// runExport writes a store back in host-local's format, for rolling back:
// into the directory host-local will read with the same ipam config.
func runExport(a *hostLocalArgs, stdout io.Writer) error {
	path := store.FilePath(a.dataDir, a.network)
	st, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no store for network %s: %s does not exist", a.network, path)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	dst := allocator.HostLocalDir(a.hlBase, a.network)
	n := 0
	var damaged []allocator.DamagedRecord
	err = st.View(func(tx *store.Tx) error {
		// A damaged record's address is still reserved: host-local must not
		// hand it out either. Its owner, as far as readable, goes in the
		// file (host-local's DEL of that owner then frees it).
		damaged = tx.DamagedRecords()
		var extra []allocator.HostLocalReservation
		for _, d := range damaged {
			if !d.IP.IsValid() {
				continue
			}
			if d.ContainerID == "" {
				extra = append(extra, allocator.HostLocalReservation{IP: d.IP, ContainerID: "hostlease-damaged-record"})
			} else {
				extra = append(extra, allocator.HostLocalReservation{IP: d.IP, ContainerID: d.ContainerID, IfName: d.IfName})
			}
		}
		n, err = allocator.ExportHostLocal(tx, dst, extra)
		return err
	})
	if err != nil {
		return err
	}
	printf(stdout, "exported %d reservation(s) to %s", n, dst)
	if !a.hlGiven && a.hlBase != allocator.DefaultHostLocalDir {
		printf(stdout, "host-local reads them with \"dataDir\": %q in the network's ipam config (as hostlease did)", a.hlBase)
	}
	if len(damaged) > 0 {
		return fmt.Errorf("%w: %d damaged record(s) exported as reservations of their owner as far as readable", errDamaged, len(damaged))
	}
	return nil
}

// unwrapPathErr is err without an *fs.PathError's own operation and path
// (the message names the path already).
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
