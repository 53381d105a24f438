package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hostlease/hostlease/internal/trustfs"
)

// host-local's on-disk format: one file per reserved address named after it,
// holding "containerID\r\nifname" (or the container ID alone, from versions
// before ifname was recorded), and last_reserved_ip.<rangeSetIndex> files.
const (
	hostLocalLockFile   = "lock"
	hostLocalLastPrefix = "last_reserved_ip."
	hostLocalLineBreak  = "\r\n"
)

// hostLocalFileName is the name of host-local's reservation file for ip (its
// disk backend: the address as text).
func hostLocalFileName(ip netip.Addr) string { return ip.String() }

// HostLocalDir is where host-local keeps a network's state under dir.
func HostLocalDir(dir, network string) string { return filepath.Join(dir, network) }

// NoHostLocalDir reports whether err, from opening a network's host-local
// directory, says the directory cannot exist: its name is longer than a file
// name may be (ENAMETOOLONG). host-local names the directory after the
// network, so it could never have kept state for such a network: there is
// nothing to import, and nowhere to export to. (Its store has a shortened
// name: store.FilePath.)
func NoHostLocalDir(err error) bool { return errors.Is(err, syscall.ENAMETOOLONG) }

// HostLocalBaseFor is host-local's data dir for a network whose store lives
// under storeDir, by the rule the plugin's config follows: an ipam dataDir D
// holds both the store (D/<network>.db) and host-local's state (D/<network>/);
// without one the store is under DefaultStoreDir and host-local's state under
// DefaultHostLocalDir.
func HostLocalBaseFor(storeDir string) string {
	if filepath.Clean(storeDir) == DefaultStoreDir {
		return DefaultHostLocalDir
	}
	return storeDir
}

// MigrateOnce imports host-local state from dir the first time any write
// transaction runs on this store, so an address in use under host-local is never
// handed out again. Later calls cost one key lookup.
func MigrateOnce(tx Store, dir, network string, sets []StoredRangeSet, now time.Time) (int, error) {
	if tx.Migrated() {
		return 0, nil
	}
	n, err := ImportHostLocal(tx, dir, network, sets, now)
	if err != nil {
		return n, err
	}
	return n, tx.MarkMigrated(now)
}

// ImportHostLocal copies host-local state from dir into the store so that no
// address in use there is handed out again. Imported records are committed
// (they were in use), keep their owner, and are attributed to the range set that
// contains them (-1 when none does), with Source SourceHostLocal (the store
// indexes them: Store.HostLocalRecords). Addresses already in the store are
// left alone. It returns how many records it added. A missing dir imports nothing.
//
// dir and the files read from it are trusted only by trustfs's contract: a
// dir or file that is a symlink, or that another user owns or can write, is
// refused (an error matching trustfs.ErrUntrusted naming it, its owner and
// mode, and the fix), and nothing is imported: importing another user's
// files would let them reserve or shape this network's addresses.
func ImportHostLocal(tx Store, dir, network string, sets []StoredRangeSet, now time.Time) (int, error) {
	d, err := trustfs.OpenDir(dir)
	if errors.Is(err, os.ErrNotExist) || NoHostLocalDir(err) {
		return 0, nil
	}
	if trustfs.IsUntrusted(err) {
		return 0, fmt.Errorf("host-local state: %w", err)
	}
	if err != nil {
		return 0, fmt.Errorf("reading host-local state %s: %w", dir, err)
	}
	defer d.Close()
	entries, err := d.Entries()
	if err != nil {
		return 0, fmt.Errorf("reading host-local state %s: %w", dir, err)
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if idx, ok := strings.CutPrefix(name, hostLocalLastPrefix); ok {
			i, err1 := strconv.Atoi(idx)
			data, err2 := d.ReadFile(name, hostLocalMaxFile)
			if trustfs.IsUntrusted(err2) {
				return n, fmt.Errorf("host-local state: %w", err2)
			}
			ip, err3 := netip.ParseAddr(strings.TrimSpace(string(data)))
			if err1 == nil && err2 == nil && err3 == nil {
				if _, has := tx.LastReserved(i); !has {
					if err := tx.SetLastReserved(i, ip.Unmap()); err != nil {
						return n, err
					}
				}
			}
			continue
		}
		ip, err := netip.ParseAddr(strings.ReplaceAll(name, "_", ":"))
		if err != nil {
			continue // "lock" and anything else that is not an address
		}
		ip = ip.Unmap()
		if tx.Taken(ip) || tx.HasRecord(ip) {
			continue
		}
		data, err := d.ReadFile(name, hostLocalMaxFile)
		if trustfs.IsUntrusted(err) {
			return n, fmt.Errorf("host-local state: %w", err)
		}
		if err != nil {
			return n, fmt.Errorf("reading host-local reservation %s: %w", name, err)
		}
		id, ifname, _ := strings.Cut(strings.TrimSpace(string(data)), hostLocalLineBreak)
		rec := &Record{
			IP: ip, RangeSet: -1, ContainerID: strings.TrimSpace(id), IfName: strings.TrimSpace(ifname),
			Network: network, State: StateCommitted, Source: SourceHostLocal, Created: now, Committed: now,
		}
		for si, set := range sets {
			if ri := rangeFor(set, ip); ri >= 0 {
				r := set.Ranges[ri]
				rec.RangeSet, rec.PrefixLen, rec.Gateway = si, r.Subnet.Bits(), r.Gateway
				break
			}
		}
		if err := tx.Put(rec); err != nil {
			return n, err
		}
		n++
	}
	if n > 0 {
		if err := tx.Audit(AuditEvent{Time: now, Action: AuditImport, Reason: fmt.Sprintf("%d reservations from %s", n, dir), By: "plugin"}); err != nil {
			return n, err
		}
	}
	return n, nil
}

// hostLocalMaxFile bounds what is read of one host-local file (a container
// ID and an ifname, or an address).
const hostLocalMaxFile = 64 << 10

// HostLocalReservation is a reservation file ExportHostLocal writes besides
// the store's records: dir/<IP> holding ContainerID, and "\r\n"+IfName when
// IfName is set.
type HostLocalReservation struct {
	IP                  netip.Addr
	ContainerID, IfName string
}

// ExportHostLocal writes the store's reservations, then extra, then the
// round-robin points to dir in host-local's format, for rolling back to
// host-local. Existing files for the same addresses are replaced; other files
// are left alone.
//
// dir (created 0755 when missing, its parents too) is used only by trustfs's
// contract: a dir that is a symlink, or that another user owns or can write,
// is refused before anything is written. Each file is written under a new
// random name (O_EXCL) and renamed into place relative to the directory
// opened: a link planted at a file's name, or at any predictable temporary
// name, is never written through.
func ExportHostLocal(tx Store, dir string, extra []HostLocalReservation) (int, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return 0, err
	}
	d, err := trustfs.MkdirOpen(dir, 0o755)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	write := func(name, content string) error { return d.WriteFile(name, []byte(content), 0o600) }
	reservation := func(r HostLocalReservation) string {
		if r.IfName == "" {
			return r.ContainerID
		}
		return r.ContainerID + hostLocalLineBreak + r.IfName
	}
	n := 0
	err = tx.ForEach(func(r *Record) error {
		if err := write(hostLocalFileName(r.IP), reservation(HostLocalReservation{r.IP, r.ContainerID, r.IfName})); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	for _, r := range extra {
		if err := write(hostLocalFileName(r.IP), reservation(r)); err != nil {
			return n, err
		}
		n++
	}
	sets, err := tx.RangeSets()
	if errors.Is(err, ErrDamagedValue) {
		// Without the range sets there are no round-robin points to write:
		// host-local then starts at each range's start. Every reservation is
		// written all the same.
		return n, nil
	}
	if err != nil {
		return n, err
	}
	for i := range sets {
		if ip, ok := tx.LastReserved(i); ok {
			if err := write(hostLocalLastPrefix+strconv.Itoa(i), ip.String()); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// ReleaseVanishedHostLocal releases every record imported from host-local
// whose reservation file (dir/<ip>, dir being HostLocalDir of the network) has
// been removed since: host-local's own DEL did that, run by a runtime that
// still holds the network's host-local config in its cache (podman after a
// switch to hostlease), so the container is gone. Each is audited
// (AuditHostLocalGone). It costs one cursor step while nothing imported is
// held, one lstat per imported record otherwise.
//
// Only host-local's own DEL is taken as proof: it removes one reservation
// file and leaves its "lock" file (which every host-local call creates). A
// missing dir, or a dir without its lock file (an operator's wipe of the
// host-local state, not a DEL), releases nothing; nor does a dir refused by
// trustfs's contract (a symlink, another user's, writable by group or
// others): whoever can change it could fake a DEL. ADD calls it; the daemon
// may too.
func ReleaseVanishedHostLocal(tx Store, dir string, now time.Time) ([]*Record, error) {
	recs, err := tx.HostLocalRecords()
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	d, err := trustfs.OpenDir(dir)
	if err != nil {
		return nil, nil
	}
	defer d.Close()
	if _, err := d.Lstat(hostLocalLockFile); err != nil {
		return nil, nil
	}
	var out []*Record
	for _, r := range recs {
		if _, err := d.Lstat(hostLocalFileName(r.IP)); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		why := Why{Action: AuditHostLocalGone, Reason: "host-local reservation file removed (host-local DEL)", By: "plugin"}
		if err := ReleaseRecord(tx, r, why, now); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
