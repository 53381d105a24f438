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

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/gc"
)

// stdin is where confirmations are read; tests replace it.
var stdin io.Reader = os.Stdin

// cmdRelease frees one address, or every address of one sandbox, by hand. It
// shows what it is about to release and asks for confirmation unless --yes.
func cmdRelease(args []string, stdout, stderr io.Writer) error {
	fs := flagSet("release", stderr)
	dataDir := dataDirFlag(fs)
	network := fs.String("network", "", "the network (needed when several stores exist)")
	sandbox := fs.String("sandbox", "", "release every address held by this sandbox (container) ID")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	var ip netip.Addr
	switch {
	case len(pos) == 1 && *sandbox == "":
		a, err := netip.ParseAddr(pos[0])
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("%w: %q is not an IP address", errUsage, pos[0])
		}
		ip = a.Unmap()
	case len(pos) == 0 && *sandbox != "":
	default:
		return fmt.Errorf("%w: give exactly one of IP or --sandbox ID", errUsage)
	}
	files, err := selectStores(*dataDir, *network)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no stores under %s", *dataDir)
	}
	if len(files) > 1 && *network == "" && *sandbox == "" {
		return fmt.Errorf("%w: %d networks under %s; name one with --network", errUsage, len(files), *dataDir)
	}
	// Find what would be released first (read-only), then confirm, then
	// release what was shown, and only that. A damaged record (its value does
	// not decode) is released by its address; never by a sandbox ID, which it
	// may show only in part.
	type target struct {
		f       gc.StoreFile
		network string
		recs    []*allocator.Record
		damaged []allocator.DamagedRecord
	}
	var targets []target
	for _, f := range files {
		v, err := readStore(f)
		if err != nil {
			return fmt.Errorf("network %s: %w", f.Network, err)
		}
		t := target{f: f, network: v.Network}
		for _, r := range v.Records {
			if (ip.IsValid() && r.IP == ip) || (*sandbox != "" && r.ContainerID == *sandbox) {
				t.recs = append(t.recs, r)
			}
		}
		for _, d := range v.Damaged {
			if ip.IsValid() && d.IP == ip {
				t.damaged = append(t.damaged, d)
			}
		}
		if len(t.recs)+len(t.damaged) > 0 {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		what := ip.String()
		if *sandbox != "" {
			what = "sandbox " + *sandbox
		}
		return fmt.Errorf("no allocation found for %s", what)
	}
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
	if !*yes {
		fmt.Fprint(stdout, "Release these addresses? A pod still using one would share it with the next pod. [y/N] ")
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return fmt.Errorf("not confirmed; nothing released")
		}
	}
	released, changed := 0, 0
	for _, t := range targets {
		st, err := store.Open(t.f.Path, store.OpenOptions{LockTimeout: cliLockTimeout, By: allocator.ByCLI("release")})
		if err != nil {
			return fmt.Errorf("network %s: %w", t.network, err)
		}
		err = st.Update(func(tx *store.Tx) error {
			release := func(ip netip.Addr) error {
				if _, err := allocator.ReleaseIP(tx, ip, "hostlease-gc release", allocator.ByCLI("release"), now); err != nil {
					return err
				}
				released++
				return nil
			}
			skip := func(ip netip.Addr) {
				// Changed since it was shown: leave the new state alone.
				printf(stderr, "hostlease-gc release: %s %s changed since it was shown; not released", t.network, ip)
				changed++
			}
			for _, want := range t.recs {
				cur, _ := tx.Lookup(want.IP)
				if cur == nil || !allocator.SameAllocation(cur, want) {
					skip(want.IP)
					continue
				}
				if err := release(want.IP); err != nil {
					return err
				}
			}
			for _, want := range t.damaged {
				cur, curD := tx.Lookup(want.IP)
				if cur != nil || curD == nil || !bytes.Equal(curD.Raw, want.Raw) {
					skip(want.IP)
					continue
				}
				if err := release(want.IP); err != nil {
					return err
				}
			}
			return nil
		})
		st.Close()
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
