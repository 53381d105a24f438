package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// stdin is where confirmations are read; tests replace it.
var stdin io.Reader = os.Stdin

// releaseCmd frees one address, or every address of one sandbox, by hand:
// find what would be released (read-only), show it and confirm (unless
// --yes), then release what was shown, and only that.
func releaseCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "release (IP | --sandbox ID)",
		Short: "release an address (or a sandbox's addresses) by hand",
		Long: "Release an address, or every address of one sandbox, by hand. It shows what it is about to release and asks\n" +
			"for confirmation unless --yes; a record that changed since it was shown is left alone (exit status 1).\n" +
			"A damaged record is released by its address, never by a sandbox ID.",
		Example: `  hostlease-gc release 10.85.0.17 -n cbr0
  hostlease-gc release --sandbox 3f2a...e1 --yes`,
		// releaseQueryOf refuses a second argument.
		Args: cobra.ArbitraryArgs,
	}
	dataDir := dataDirFlag(c)
	network := networkFlag(c, "the network (needed when several stores exist)")
	sandbox := c.Flags().String("sandbox", "", "release every address held by this sandbox (container) ID")
	yes := c.Flags().BoolP("yes", "y", false, "do not ask for confirmation")
	lockTimeout := lockTimeoutFlag(c)
	c.RunE = func(_ *cobra.Command, args []string) error {
		q, err := releaseQueryOf(args, *sandbox)
		if err != nil {
			return err
		}
		targets, err := findRelease(*dataDir, *network, q, *lockTimeout)
		if err != nil {
			return err
		}
		if err := confirmRelease(stdout, targets, *yes); err != nil {
			return err
		}
		return applyRelease(stdout, stderr, targets, *lockTimeout)
	}
	return c
}

// releaseQuery is what release was asked to free: one address, or one
// sandbox's addresses.
type releaseQuery struct {
	ip      netip.Addr
	sandbox string
}

func (q releaseQuery) String() string {
	if q.sandbox != "" {
		return "sandbox " + q.sandbox
	}
	return q.ip.String()
}

func releaseQueryOf(args []string, sandbox string) (releaseQuery, error) {
	switch {
	case len(args) == 1 && sandbox == "":
		a, err := netip.ParseAddr(args[0])
		if err != nil || a.Zone() != "" {
			return releaseQuery{}, fmt.Errorf("%w: %q is not an IP address", errUsage, args[0])
		}
		return releaseQuery{ip: a.Unmap()}, nil
	case len(args) == 0 && sandbox != "":
		return releaseQuery{sandbox: sandbox}, nil
	}
	return releaseQuery{}, fmt.Errorf("%w: give exactly one of IP or --sandbox ID", errUsage)
}

// releaseTarget is what release found in one store: the records it shows and
// will release, exactly as read.
type releaseTarget struct {
	f       daemon.StoreFile
	network string
	recs    []*allocator.Record
	damaged []allocator.DamagedRecord
}

// findRelease reads the stores and returns what q would release. A damaged
// record (its value does not decode) is found by its address only: a
// sandbox ID it may show only in part.
func findRelease(dataDir, network string, q releaseQuery, lockTimeout time.Duration) ([]releaseTarget, error) {
	files, err := selectStores(dataDir, network)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no stores under %s", dataDir)
	}
	if len(files) > 1 && network == "" && q.sandbox == "" {
		return nil, fmt.Errorf("%w: %d networks under %s; name one with --network", errUsage, len(files), dataDir)
	}
	var targets []releaseTarget
	for _, f := range files {
		v, err := readStore(f, lockTimeout)
		if err != nil {
			return nil, fmt.Errorf("network %s: %w", f.Network, err)
		}
		t := releaseTarget{f: f, network: v.Network}
		for _, r := range v.Records {
			if (q.ip.IsValid() && r.IP == q.ip) || (q.sandbox != "" && r.ContainerID == q.sandbox) {
				t.recs = append(t.recs, r)
			}
		}
		for _, d := range v.Damaged {
			if q.ip.IsValid() && d.IP == q.ip {
				t.damaged = append(t.damaged, d)
			}
		}
		if len(t.recs)+len(t.damaged) > 0 {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no allocation found for %s", q)
	}
	return targets, nil
}

// confirmRelease shows the targets and, unless yes, asks on stdin.
func confirmRelease(stdout io.Writer, targets []releaseTarget, yes bool) error {
	now := time.Now()
	for _, t := range targets {
		for _, r := range t.recs {
			printf(stdout, "%s %s held by pod %s, sandbox %s ifname %s, %s, age %s",
				t.network, r.IP, orDash(r.PodRef()), r.ContainerID, orDash(r.IfName), r.State, age(now.Sub(r.Created)))
		}
		for _, d := range t.damaged {
			printf(stdout, "%s %s DAMAGED record (%s); owner as far as readable: sandbox %s ifname %s",
				t.network, d.IP, damagedErr(d), orDash(d.ContainerID), orDash(d.IfName))
		}
	}
	if yes {
		return nil
	}
	fmt.Fprint(stdout, "Release these addresses? A pod still using one would share it with the next pod. [y/N] ")
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
		return fmt.Errorf("not confirmed; nothing released")
	}
	return nil
}

// applyRelease releases what was shown, each store in one write
// transaction; a record that changed since it was read is left alone.
func applyRelease(stdout, stderr io.Writer, targets []releaseTarget, lockTimeout time.Duration) error {
	released, changed := 0, 0
	for _, t := range targets {
		r, c, err := releaseIn(t, lockTimeout, stderr)
		released += r
		changed += c
		if err != nil {
			return fmt.Errorf("network %s: %w", t.network, err)
		}
	}
	printf(stdout, "released %d address(es)", released)
	if changed > 0 {
		return fmt.Errorf("%d address(es) not released: changed since shown; look again", changed)
	}
	return nil
}

// releaseIn releases t's records in its store, those still exactly as shown.
func releaseIn(t releaseTarget, lockTimeout time.Duration, stderr io.Writer) (released, changed int, err error) {
	st, err := store.Open(t.f.Path, store.OpenOptions{LockTimeout: lockTimeout, By: allocator.ByCLI("release")})
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	now := time.Now()
	err = st.Update(func(tx *store.Tx) error {
		released, changed = 0, 0
		release := func(ip netip.Addr, same bool) error {
			if !same {
				// Changed since it was shown: leave the new state alone.
				printf(stderr, "hostlease-gc release: %s %s changed since it was shown; not released", t.network, ip)
				changed++
				return nil
			}
			if _, err := allocator.ReleaseIP(tx, ip, "hostlease-gc release", allocator.ByCLI("release"), now); err != nil {
				return err
			}
			released++
			return nil
		}
		for _, want := range t.recs {
			cur, _ := tx.Lookup(want.IP)
			if err := release(want.IP, cur != nil && allocator.SameAllocation(cur, want)); err != nil {
				return err
			}
		}
		for _, want := range t.damaged {
			cur, curD := tx.Lookup(want.IP)
			if err := release(want.IP, cur == nil && curD != nil && bytes.Equal(curD.Raw, want.Raw)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return released, changed, nil
}
