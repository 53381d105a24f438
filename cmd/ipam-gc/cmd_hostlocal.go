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
	// lockTimeout: how long to wait for the store's lock.
	lockTimeout time.Duration
}

// hostLocalFlags registers import's and export's flags; check turns them
// into hostLocalArgs.
func hostLocalFlags(c *cobra.Command) func() (*hostLocalArgs, error) {
	dataDir := dataDirFlag(c)
	network := networkFlag(c, "the network name (required)")
	lockTimeout := lockTimeoutFlag(c)
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
		a := &hostLocalArgs{dataDir: *dataDir, network: *network, hlBase: *hlDir, hlGiven: c.Flags().Changed("host-local-dir"), lockTimeout: *lockTimeout}
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

// withHostLocalFlags gives c the flags import and export share and runs run
// with them.
func withHostLocalFlags(c *cobra.Command, stdout io.Writer, run func(*hostLocalArgs, io.Writer) error) *cobra.Command {
	args := hostLocalFlags(c)
	c.RunE = func(*cobra.Command, []string) error {
		a, err := args()
		if err != nil {
			return err
		}
		return run(a, stdout)
	}
	return c
}

func importCmd(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "import --network N",
		Short: "import host-local state into a store",
		Long: "Merge host-local's reservations of a network into its store (migration): reservations the store does not hold\n" +
			"are imported; an address the store holds for another attachment is a conflict, kept for the store's holder,\n" +
			"printed one line each (exit status 4).",
		Example: `  hostlease-gc import -n cbr0
  hostlease-gc import -n cbr0 --host-local-dir /var/lib/cni/networks`,
		Args: noArgs,
	}
	return withHostLocalFlags(c, stdout, runImport)
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
	return withHostLocalFlags(c, stdout, runExport)
}

// runImport merges host-local's state for a network into its store
// (allocator.ImportNow): reservations the store does not hold are imported;
// an address the store holds for another attachment is a conflict, kept
// for the store's holder, printed one line each (exit 4).
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
	st, err := store.Open(store.FilePath(a.dataDir, a.network), store.OpenOptions{Create: true, LockTimeout: a.lockTimeout, By: allocator.ByCLI("import")})
	if err != nil {
		return err
	}
	defer st.Close()
	var res allocator.ImportResult
	err = st.Update(func(tx *store.Tx) error {
		sets, err := tx.RangeSets()
		if err != nil {
			return err
		}
		if err := tx.SetNetwork(a.network); err != nil {
			return err
		}
		res, err = allocator.ImportNow(tx, src, a.network, sets, allocator.ByCLI("import"), time.Now())
		return err
	})
	if err != nil {
		return err
	}
	printConflicts(stdout, res.Conflicts)
	printf(stdout, "imported %d reservation(s) from %s into %s; %d already held for the same attachment; %d conflict(s)",
		res.Imported, src, st.Path(), res.Same, len(res.Conflicts))
	if len(res.Conflicts) > 0 {
		return conflictErr(len(res.Conflicts))
	}
	return nil
}

// printConflicts prints one line per conflict: the address, the attachment
// host-local's file names, and whom the store holds it for.
func printConflicts(stdout io.Writer, conflicts []allocator.ImportConflict) {
	for _, c := range conflicts {
		holder := "container %s ifname %s"
		if c.Damaged {
			holder = "a damaged record of container %s ifname %s (as far as readable)"
		}
		printf(stdout, "conflict %s: host-local's file names container %s ifname %s; the store holds it for "+holder+": kept reserved for the store's holder, not handed out",
			c.File.IP, orDash(c.File.ContainerID), orDash(c.File.IfName), orDash(c.StoreContainerID), orDash(c.StoreIfName))
	}
}

// conflictErr is the error (exit 4) of a command that found n conflicts.
func conflictErr(n int) error {
	return fmt.Errorf("%w: %d address(es) host-local's files name are held in the store for another attachment (listed above; audited as %s)",
		errConflict, n, allocator.AuditImportConflict)
}

// runExport writes a store back in host-local's format, for rolling back:
// into the directory host-local will read with the same ipam config. The
// store is marked exported in the same transaction, under its write lock:
// from then on every plugin write merges what host-local changes there
// (allocator.SyncHostLocal).
func runExport(a *hostLocalArgs, stdout io.Writer) error {
	path := store.FilePath(a.dataDir, a.network)
	st, err := store.Open(path, store.OpenOptions{LockTimeout: a.lockTimeout, By: allocator.ByCLI("export")})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no store for network %s: %s does not exist", a.network, path)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	dst := allocator.HostLocalDir(a.hlBase, a.network)
	var res allocator.ExportResult
	var damaged []allocator.DamagedRecord
	err = st.Update(func(tx *store.Tx) error {
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
				extra = append(extra, allocator.HostLocalReservation{IP: d.IP, ContainerID: allocator.DamagedPlaceholder})
			} else {
				extra = append(extra, allocator.HostLocalReservation{IP: d.IP, ContainerID: d.ContainerID, IfName: d.IfName})
			}
		}
		res, err = allocator.ExportHostLocal(tx, dst, a.network, extra, allocator.ByCLI("export"), time.Now())
		return err
	})
	if err != nil {
		return err
	}
	if m := res.Merged; m.Imported > 0 || len(m.Conflicts) > 0 {
		printConflicts(stdout, m.Conflicts)
		printf(stdout, "merged host-local's changes since the last export first: imported %d reservation(s); %d conflict(s) (their files left as they are)",
			m.Imported, len(m.Conflicts))
	}
	printf(stdout, "exported %d reservation(s) to %s", res.Written, dst)
	if !a.hlGiven && a.hlBase != allocator.DefaultHostLocalDir {
		printf(stdout, "host-local reads them with \"dataDir\": %q in the network's ipam config (as hostlease did)", a.hlBase)
	}
	if len(damaged) > 0 {
		return fmt.Errorf("%w: %d damaged record(s) exported as reservations of their owner as far as readable", errDamaged, len(damaged))
	}
	if len(res.Merged.Conflicts) > 0 {
		return conflictErr(len(res.Merged.Conflicts))
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
