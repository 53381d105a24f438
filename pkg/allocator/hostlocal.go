package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// ImportHostLocal copies host-local state from dir into the store so that no
// address in use there is handed out again. Imported records are committed
// (they were in use), keep their owner, and are attributed to the range set that
// contains them (-1 when none does). Addresses already in the store are left
// alone. It returns how many records it added. A missing dir imports nothing.
func ImportHostLocal(tx *Tx, dir, network string, sets []StoredRangeSet, now time.Time) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
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
			data, err2 := os.ReadFile(filepath.Join(dir, name))
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
		if tx.Taken(ip) || tx.hasRecord(ip) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
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
		if tx.imported != nil {
			if err := tx.imported.Put(addrKey(ip), nil); err != nil {
				return n, err
			}
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

// ExportHostLocal writes the store's reservations and round-robin points to dir
// in host-local's format, for rolling back to host-local. Existing files for the
// same addresses are overwritten; other files are left alone.
func ExportHostLocal(tx *Tx, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	n := 0
	err := tx.ForEach(func(r *Record) error {
		content := r.ContainerID
		if r.IfName != "" {
			content += hostLocalLineBreak + r.IfName
		}
		if err := writeFileAtomic(filepath.Join(dir, r.IP.String()), []byte(content)); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
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
			if err := writeFileAtomic(filepath.Join(dir, hostLocalLastPrefix+strconv.Itoa(i)), []byte(ip.String())); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// writeFileAtomic writes data to a temporary file and renames it into place so a
// reader never sees a half-written file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp-hostlease"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// MarkMigrated records that host-local state must not be imported into this
// store (it was rebuilt from the runtime, which is more recent truth).
func (tx *Tx) MarkMigrated(now time.Time) error {
	return tx.meta.Put(keyImported, []byte(now.UTC().Format(time.RFC3339)))
}
