package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/gc"
)

// cmdRebuild repairs a network's store from the runtime's view:
//   - a store that cannot be used (bbolt cannot open it, or a page is
//     damaged) is set aside and rebuilt from CRI's READY sandboxes;
//   - a store that opens but holds damaged records (values that do not
//     decode) is repaired in place: each damaged address a READY sandbox
//     uses (or that the readable part of the record names a listed sandbox
//     for) is recorded for that sandbox, the others are released, every
//     healthy record is kept and the indexes are verified;
//   - a healthy store is rebuilt from CRI only with --force.
//
// Environment errors (permissions, read-only, no space...) are never a
// reason to rebuild: they are reported as they are.
func cmdRebuild(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("rebuild", stderr)
	dataDir := dataDirFlag(fs)
	network := fs.String("network", "", "the network whose store to rebuild (required)")
	endpoint := fs.String("cri-endpoint", gc.DefaultCRIEndpoint, "CRI runtime endpoint (unix socket)")
	force := fs.Bool("force", false, "set the store aside and rebuild it from CRI even though it is usable (pending ADDs in flight are forgotten)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("%w: --network is required", errUsage)
	}
	if err := checkCRIEndpoint(*endpoint); err != nil {
		return err
	}
	files, err := selectStores(*dataDir, *network)
	if err != nil {
		return err
	}
	f := files[0]
	view, readErr := readStore(f)
	var sets []allocator.StoredRangeSet
	switch {
	case readErr == nil && len(view.Damaged) == 0 && !*force:
		return fmt.Errorf("store %s is readable (%d records); pass --force to rebuild it anyway (no record is damaged)", f.Path, len(view.Records))
	case readErr == nil:
		sets = view.RangeSets
	case allocator.IsDamage(readErr):
		sets = rangeSetsOf(f.Path)
	default:
		return fmt.Errorf("not rebuilding: %w (not damage: fix the cause)", readErr)
	}
	cri, err := gc.DialCRI(*endpoint)
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
	crView, sandboxes := gc.ListView(ctx, cri, committed, time.Now())
	if !crView.Complete {
		return fmt.Errorf("not rebuilding: %s", crView.Why)
	}
	if readErr == nil && !*force {
		return repairDamaged(ctx, stdout, cri, f, view, sandboxes)
	}
	aside, n, err := gc.RebuildStore(ctx, cri, f.Path, *network, sandboxes, sets, time.Now().UTC())
	if err != nil {
		return err
	}
	printf(stdout, "rebuilt %s with %d record(s) from %d sandbox(es); previous store kept as %s", f.Path, n, len(sandboxes), aside)
	return nil
}

// rangeSetsOf reads the range sets of a store whose records cannot all be
// read (nil when they cannot be read either): a rebuild keeps only the
// network's addresses when it knows them.
func rangeSetsOf(path string) []allocator.StoredRangeSet {
	st, err := allocator.Open(path, allocator.OpenOptions{ReadOnly: true, LockTimeout: cliLockTimeout})
	if err != nil {
		return nil
	}
	defer st.Close()
	var sets []allocator.StoredRangeSet
	_ = st.View(func(tx *allocator.Tx) error {
		sets, _ = tx.RangeSets()
		return nil
	})
	return sets
}

// repairDamaged rewrites a store's damaged records from the runtime's view,
// in one transaction, keeping every healthy record.
func repairDamaged(ctx context.Context, stdout io.Writer, cri gc.CRI, f gc.StoreFile, view *storeView, sandboxes []gc.CRISandbox) error {
	// Which READY sandbox uses which address; which sandboxes are listed.
	users := map[netip.Addr]gc.CRISandbox{}
	listed := map[string]gc.CRISandbox{}
	for _, sb := range sandboxes {
		listed[sb.ID] = sb
		if sb.State != gc.SandboxReady {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		ips, err := cri.SandboxIPs(cctx, sb.ID)
		cancel()
		if err != nil {
			return fmt.Errorf("not repairing: PodSandboxStatus %s: %w (the repair needs every READY sandbox's addresses)", sb.ID, err)
		}
		for _, ip := range ips {
			users[ip] = sb
		}
	}
	st, err := allocator.Open(f.Path, allocator.OpenOptions{LockTimeout: cliLockTimeout})
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now().UTC()
	var recorded, released, changed, keyless int
	var repair allocator.IndexRepair
	err = st.Update(func(tx *allocator.Tx) error {
		for _, d := range view.Damaged {
			if !d.IP.IsValid() {
				keyless++
				continue
			}
			if cur, curD := tx.Lookup(d.IP); cur != nil || curD == nil {
				changed++ // rewritten or released since it was read
				continue
			}
			// The READY sandbox using the address; else the sandbox the
			// record's readable part names, while the runtime lists it (it
			// releases the address with its DEL); else nobody: free it.
			owner, ifname := users[d.IP], ""
			if sb, ok := listed[d.ContainerID]; ok && d.ContainerID != "" && (owner.ID == "" || owner.ID == sb.ID) {
				owner, ifname = sb, d.IfName
			}
			if owner.ID == "" {
				if _, err := allocator.ReleaseIP(tx, d.IP, "hostlease-gc rebuild: no sandbox the runtime lists uses it", "operator", now); err != nil {
					return err
				}
				released++
				continue
			}
			rec := &allocator.Record{IP: d.IP, RangeSet: view.rangeSetOf(d.IP), ContainerID: owner.ID, IfName: ifname,
				Network: view.Network, PodNamespace: owner.PodNamespace, PodName: owner.PodName, PodUID: owner.PodUID,
				State: allocator.StateCommitted, Source: "rebuild", Created: now, Committed: now}
			if rs := rec.RangeSet; rs >= 0 {
				for _, r := range view.RangeSets[rs].Ranges {
					if r.Contains(d.IP) {
						rec.PrefixLen, rec.Gateway = r.Subnet.Bits(), r.Gateway
					}
				}
			}
			if _, _, err := tx.Replace(rec); err != nil {
				return err
			}
			if err := tx.Audit(allocator.AuditEvent{Time: now, Action: "rebuild", By: "operator", IP: d.IP, ContainerID: owner.ID, IfName: ifname,
				Pod: rec.PodRef(), Reason: "damaged record (" + damagedErr(d) + ") re-recorded for the sandbox the runtime lists"}); err != nil {
				return err
			}
			recorded++
		}
		var err error
		repair, err = tx.RepairIndexes("hostlease-gc rebuild", now)
		return err
	})
	if err != nil {
		return err
	}
	printf(stdout, "repaired %s in place: %d damaged record(s) re-recorded for the sandbox the runtime lists, %d released (no listed sandbox uses them), %d healthy record(s) kept",
		f.Path, recorded, released, len(view.Records))
	if repair.Changed() {
		printf(stdout, "indexes repaired: %s", repair)
	}
	if changed > 0 {
		printf(stdout, "%d damaged record(s) changed since they were read and were left alone", changed)
	}
	if keyless > 0 {
		return fmt.Errorf("%d damaged record(s) have no readable address; run rebuild --force to rebuild the store from CRI", keyless)
	}
	return nil
}
