package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
	"github.com/hostlease/hostlease/pkg/reclaim"
)

// RebuildStore replaces the store at path with one rebuilt from the runtime
// and from what can still be read of the old one (reclaim.MergeRebuild says
// what it holds). The old file is kept as <path>.corrupt-<unix>. It is three
// steps: gather (the runtime's addresses, before any lock), merge (pure) and
// replace (under the old file's lock).
//
// The swap keeps the contract of store/lockfile.go: RebuildStore takes the
// old file's exclusive lock (a raw flock, which a file bbolt cannot open takes
// too) and proves it is the file at path before it reads it; it holds that
// lock while it reads, builds the new store complete under a random name in
// the same directory (fsynced), hard-links the old one aside (a new name,
// never an existing one) and renames the new one over it, and only then
// releases it. A plugin therefore sees the old store or the rebuilt one, never
// a missing store it would create empty and allocate from; a plugin that
// waited for the old file's lock finds it is no longer at path and opens the
// rebuilt one, so nothing it writes lands in the set-aside file, and every
// record written before the lock was had is read and kept.
//
// when is judged under the lock, on the file at path then: a store that no
// longer needs the rebuild asked for (another process rebuilt it since it was
// judged) is left as it is, with ErrNotRebuilt. by names who acts in the
// audit (allocator.ByDaemon, allocator.ByCLI("rebuild")).
func RebuildStore(ctx context.Context, cri CRI, path, network string, sandboxes []reclaim.PodSandbox, sets []allocator.StoredRangeSet, now time.Time, when RebuildWhen, by string) (aside string, n int, err error) {
	if err := store.CheckTrusted(path); err != nil {
		return "", 0, err
	}
	addrs, err := gatherAddrs(ctx, cri, sandboxes)
	if err != nil {
		return "", 0, err
	}
	// From here to the rename, the old file is locked: nobody writes it.
	oldFile, err := store.LockFile(path, store.LockOptions{Exclusive: true, Timeout: storeLockTimeout, By: by})
	if err != nil {
		return "", 0, err
	}
	defer oldFile.Close()
	// What the old store still holds, when it opens at all.
	old := salvage(oldFile)
	if !when.needs(old) {
		return "", 0, fmt.Errorf("%w: %s %s", ErrNotRebuilt, path, old.health())
	}
	listed := make(map[string]bool, len(sandboxes))
	for _, sb := range sandboxes {
		listed[sb.ID] = true
	}
	rebuilt := reclaim.MergeRebuild(reclaim.RebuildInput{Network: network, Sets: sets, Sandboxes: addrs, Listed: listed, Old: old.Salvage, Now: now})
	aside, err = replaceStore(oldFile, path, network, old, rebuilt, now, by)
	if err != nil {
		return "", 0, err
	}
	return aside, len(rebuilt.Records), nil
}

// gatherAddrs asks the runtime for the addresses of every READY and NOTREADY
// sandbox: a READY one's must all be known (an error otherwise), a stopped
// one may have no status left.
func gatherAddrs(ctx context.Context, cri CRI, sandboxes []reclaim.PodSandbox) ([]reclaim.SandboxAddrs, error) {
	var out []reclaim.SandboxAddrs
	for _, sb := range sandboxes {
		if sb.State != reclaim.SandboxReady && sb.State != reclaim.SandboxNotReady {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, criTimeout)
		ips, err := cri.SandboxIPs(cctx, sb.ID)
		cancel()
		if err != nil {
			if sb.State != reclaim.SandboxReady {
				continue // a stopped sandbox may have no status left
			}
			return nil, fmt.Errorf("PodSandboxStatus %s: %w (rebuild needs every READY sandbox's addresses)", sb.ID, err)
		}
		out = append(out, reclaim.SandboxAddrs{Sandbox: sb, IPs: ips})
	}
	return out, nil
}

// replaceStore sets the locked old file aside and replaces it with a store
// holding rebuilt, audited as a rebuild by by.
func replaceStore(oldFile *store.LockedFile, path, network string, old salvaged, rebuilt *reclaim.Rebuilt, now time.Time, by string) (string, error) {
	aside, err := oldFile.SetAside(func(n int) string {
		if n == 0 {
			return fmt.Sprintf("%s.corrupt-%d", path, now.Unix())
		}
		return fmt.Sprintf("%s.corrupt-%d.%d", path, now.Unix(), n)
	})
	if err != nil {
		return "", fmt.Errorf("keeping the old store: %w", err)
	}
	err = oldFile.Replace(func(tx *store.Tx) error {
		if err := tx.SetNetwork(network); err != nil {
			return err
		}
		if len(rebuilt.Sets) > 0 {
			if err := tx.SetRangeSets(rebuilt.Sets); err != nil {
				return err
			}
		}
		// The runtime is the truth now; stale host-local files must not be
		// imported over it.
		if err := tx.MarkMigrated(now); err != nil {
			return err
		}
		// An exported store stays exported: what host-local does (or did
		// since the export) is still merged before the plugin chooses. Its
		// stamp is dropped, so the next write merges.
		if old.exported {
			if err := tx.SetHostLocalExport(allocator.HostLocalExport{At: old.export.At}); err != nil {
				return err
			}
		}
		for _, r := range rebuilt.Records {
			if prev, dmg := tx.Lookup(r.IP); prev != nil || dmg != nil {
				continue
			}
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return tx.Audit(allocator.AuditEvent{Time: now, Action: allocator.AuditRebuild, By: by, Reason: rebuilt.Why()})
	})
	if err != nil {
		// The set-aside link is a second name of the store still in place.
		_ = oldFile.RemoveAside(aside)
		return "", err
	}
	return aside, nil
}

// RebuildWhen says which stores RebuildStore replaces. It is judged on the
// store read under its lock, so a store another process rebuilt since the
// caller judged it is not rebuilt again.
type RebuildWhen int

const (
	// RebuildAlways rebuilds whatever the store holds (`rebuild --force`).
	RebuildAlways RebuildWhen = iota
	// RebuildDamaged rebuilds a store that does not open, holds a damaged
	// record or has a damaged page (`rebuild` without --force).
	RebuildDamaged
	// RebuildUnreadable rebuilds a store that does not open (ErrUnreadable:
	// the daemon).
	RebuildUnreadable
)

// ErrNotRebuilt: the store, read under its lock, did not need the rebuild
// asked for; it was left as it is.
var ErrNotRebuilt = errors.New("store not rebuilt: it no longer needs it")

func (w RebuildWhen) needs(old salvaged) bool {
	switch w {
	case RebuildDamaged:
		return old.openErr != nil || old.rootErr != nil || old.walkErr != nil || len(old.Damaged) > 0
	case RebuildUnreadable:
		return errors.Is(old.openErr, store.ErrUnreadable) || errors.Is(old.rootErr, store.ErrUnreadable)
	}
	return true
}

// salvaged is what could still be read of a store before a rebuild.
type salvaged struct {
	reclaim.Salvage
	// export is the store's mark of an export to host-local's files, when
	// it had one (exported).
	export   allocator.HostLocalExport
	exported bool
	// openErr is why the store did not open; rootErr the damage in its root
	// page's entries (store.RootDamage: a store any other open refuses);
	// walkErr why a walk over its records stopped.
	openErr, rootErr, walkErr error
}

// health says what the salvage found, for an error.
func (s salvaged) health() string {
	switch {
	case s.openErr != nil:
		return fmt.Sprintf("does not open: %v", s.openErr)
	case s.rootErr != nil:
		return fmt.Sprintf("is damaged: %v", s.rootErr)
	case s.walkErr != nil:
		return fmt.Sprintf("is damaged: %v", s.walkErr)
	case len(s.Damaged) > 0:
		return fmt.Sprintf("holds %d damaged record(s)", len(s.Damaged))
	}
	return fmt.Sprintf("is healthy (%d records)", len(s.Records))
}

// maxProbe bounds the addresses a salvage looks up one by one behind a
// damaged page (a /16's worth: well under a second).
const maxProbe = 1 << 16

// salvage reads what it can of the locked store file: nothing when it does
// not open; the records that decode, the damaged ones and the range sets
// otherwise. A damaged page stops a walk over the records; then every
// address of the range sets (up to maxProbe of them) is looked up on its own,
// so the records on the readable pages past it are kept too, and the
// addresses whose lookup meets the damaged page are listed as unreadable
// unless the taken bitmap, read apart, says they were free.
func salvage(f *store.LockedFile) salvaged {
	var out salvaged
	st, err := f.Store()
	if err != nil {
		out.openErr = err
		return out
	}
	out.rootErr = st.RootDamage()
	_ = st.View(func(tx *store.Tx) error {
		out.Sets, _ = tx.RangeSets()
		out.export, out.exported = tx.HostLocalExport()
		return nil
	})
	walked := st.View(func(tx *store.Tx) error {
		out.Damaged = tx.DamagedRecords()
		return tx.ForEach(func(r *allocator.Record) error {
			cp := *r
			out.Records = append(out.Records, &cp)
			return nil
		})
	})
	out.walkErr = walked
	if walked == nil || !errors.Is(walked, store.ErrPageDamaged) {
		return out
	}
	seen := make(map[netip.Addr]bool, len(out.Records)+len(out.Damaged))
	for _, r := range out.Records {
		seen[r.IP] = true
	}
	for _, d := range out.Damaged {
		seen[d.IP] = true
	}
	probed := 0
	for _, set := range out.Sets {
		for _, r := range set.Ranges {
			for ip := r.Start; ip.IsValid() && ip.Compare(r.End) <= 0 && probed < maxProbe; ip = ip.Next() {
				probed++
				if seen[ip] {
					continue
				}
				var rec *allocator.Record
				var dmg *allocator.DamagedRecord
				if err := st.View(func(tx *store.Tx) error {
					rec, dmg = tx.Lookup(ip)
					return nil
				}); err != nil {
					// The taken bitmap is derived from the records but
					// lives on other pages: where it still reads, it tells
					// which of these addresses were held.
					taken := true
					if st.View(func(tx *store.Tx) error {
						taken = tx.Taken(ip)
						return nil
					}) != nil {
						taken = true
					}
					if taken {
						out.Unreadable = append(out.Unreadable, ip)
					}
					continue
				}
				switch {
				case rec != nil:
					out.Records = append(out.Records, rec)
				case dmg != nil:
					out.Damaged = append(out.Damaged, *dmg)
				}
			}
		}
	}
	return out
}
