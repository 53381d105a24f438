package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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
	mark := tx.HostLocalMark()
	if mark.Imported {
		return 0, nil
	}
	n, err := ImportHostLocal(tx, dir, network, sets, now)
	if err != nil {
		return n, err
	}
	mark.Imported = true
	return n, tx.SetHostLocalMark(mark, now)
}

// SyncHostLocal brings what host-local did into the store before a plugin
// write (ADD, DEL, GC) decides anything, so that no address host-local
// handed out is handed out again:
//   - on the network's first use, host-local's state is imported (as
//     MigrateOnce);
//   - once the store was exported (ExportHostLocal marks it), host-local's
//     files in dir are merged again whenever dir changed since the export
//     or the last merge (its device, inode and ctime: every reservation
//     host-local makes or frees creates or removes a file there). This is
//     what makes rolling back to host-local and returning safe, whenever
//     the return happens: MergeHostLocal imports every reservation the
//     store does not hold and keeps, reports and audits every conflict.
//
// A store never exported costs one key lookup more than MigrateOnce; an
// exported one an lstat of dir while dir is unchanged. by is who acts
// (ByPlugin).
func SyncHostLocal(tx Store, dir, network string, sets []StoredRangeSet, by string, now time.Time) (ImportResult, error) {
	mark := tx.HostLocalMark()
	if !mark.Imported {
		return ImportNow(tx, dir, network, sets, by, now)
	}
	if !mark.Exported {
		return ImportResult{}, nil
	}
	m := mark.Export
	st, err := statDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return ImportResult{}, nil // nothing of host-local's to merge
	}
	if err == nil && m.Seen.Valid() && st == m.Seen {
		return ImportResult{}, nil // unchanged since the export or the last merge
	}
	return ImportNow(tx, dir, network, sets, by, now)
}

// ImportNow merges host-local's state from dir into the store now (the
// plugin's first use, a change SyncHostLocal saw, an operator's `import`),
// marks the store migrated and, when the store was exported, records dir's
// stamp as merged. Host-local's round-robin points replace the store's only
// when the store was exported (host-local was in charge since); otherwise
// they are taken where the store has none.
func ImportNow(tx Store, dir, network string, sets []StoredRangeSet, by string, now time.Time) (ImportResult, error) {
	mark := tx.HostLocalMark()
	res, err := MergeHostLocal(tx, dir, network, sets, MergeOptions{By: by, RoundRobin: mark.Exported}, now)
	if err != nil {
		return res, err
	}
	mark.Imported = true
	if mark.Exported {
		mark.Export.Seen = res.Stamp.settled(now)
	}
	return res, tx.SetHostLocalMark(mark, now)
}

// ImportHostLocal is MergeHostLocal as the plugin's first use runs it
// (ByPlugin; host-local's round-robin points only where the store has
// none), returning how many records it added.
func ImportHostLocal(tx Store, dir, network string, sets []StoredRangeSet, now time.Time) (int, error) {
	res, err := MergeHostLocal(tx, dir, network, sets, MergeOptions{By: ByPlugin}, now)
	return res.Imported, err
}

// HostLocalExport is a store's mark of its last export to host-local's
// files: when it was written, and host-local's directory as last merged
// (Seen; zero until a merge stamped it, or when the directory changed too
// recently for its ctime to tell a later change apart). While a store
// carries it, SyncHostLocal merges whatever host-local changed.
type HostLocalExport struct {
	At   time.Time
	Seen DirStamp
}

// DirStamp identifies a directory's content as of a moment: its device,
// inode and ctime (which the kernel sets at every entry created or removed,
// and which no user can set). The zero stamp matches nothing.
type DirStamp struct {
	Dev, Ino uint64
	Ctime    int64 // nanoseconds since the epoch
}

// Valid reports whether s was taken (the zero stamp was not).
func (s DirStamp) Valid() bool { return s != DirStamp{} }

// stampSettle is how long after a directory's last change its stamp is
// trusted: a change within the same tick of the kernel's coarse clock would
// leave the ctime as it was (the racy-timestamp problem). A stamp taken
// sooner is recorded as zero, so the next call merges again.
const stampSettle = 2 * time.Second

// settled is s when the directory's last change is at least stampSettle
// before now, else the zero stamp.
func (s DirStamp) settled(now time.Time) DirStamp {
	if !s.Valid() || now.Sub(time.Unix(0, s.Ctime)) < stampSettle {
		return DirStamp{}
	}
	return s
}

// HostLocalFile is one host-local reservation file as read: the address it
// is named after and the attachment it names (IfName empty in files of
// versions before ifname was recorded).
type HostLocalFile struct {
	IP                  netip.Addr
	ContainerID, IfName string
}

// MergeVerdict is what a merge does with one host-local reservation.
type MergeVerdict int

const (
	// MergeImport: the store holds nothing there; the reservation is
	// imported (committed, Source SourceHostLocal).
	MergeImport MergeVerdict = iota
	// MergeSame: the store holds the address for the same attachment.
	MergeSame
	// MergeConflict: the store holds the address for another attachment,
	// or a damaged record of another (or an unreadable) owner holds it. The
	// address stays reserved for the store's holder (no write replaces
	// another owner's record) and is never handed out; the conflict is
	// audited (AuditImportConflict) and reported.
	MergeConflict
)

// DecideMerge is the merge's decision for host-local's reservation f given
// what the store holds at f.IP: a record, a damaged record, or neither. One
// attachment is the same container ID with the same ifname, or with no
// ifname on either side (a record or file of a version before ifname was
// recorded). A damaged record is the same only when its readable part
// names that attachment, or names none and the file is the placeholder
// export wrote for it.
func DecideMerge(f HostLocalFile, cur *Record, damaged *DamagedRecord) MergeVerdict {
	switch {
	case damaged != nil:
		if damaged.ContainerID == "" && f.ContainerID == DamagedPlaceholder ||
			damaged.ContainerID != "" && sameAttachment(f, Attachment{damaged.ContainerID, damaged.IfName}) {
			return MergeSame
		}
		return MergeConflict
	case cur == nil:
		return MergeImport
	case sameAttachment(f, cur.Attachment()):
		return MergeSame
	}
	return MergeConflict
}

func sameAttachment(f HostLocalFile, a Attachment) bool {
	return f.ContainerID == a.ContainerID && (f.IfName == a.IfName || f.IfName == "" || a.IfName == "")
}

// DamagedPlaceholder is the container ID export writes in host-local's file
// for a damaged record whose owner cannot be read.
const DamagedPlaceholder = "hostlease-damaged-record"

// ImportConflict is one MergeConflict: host-local's file and who the store
// holds the address for (Damaged: a damaged record, its owner as far as
// readable).
type ImportConflict struct {
	File                          HostLocalFile
	StoreContainerID, StoreIfName string
	Damaged                       bool
}

// ImportResult is what a merge did: records imported, reservations the
// store already held for the same attachment, the conflicts (in address
// order), and the directory's stamp taken before it was read.
type ImportResult struct {
	Imported, Same int
	Conflicts      []ImportConflict
	Stamp          DirStamp
}

// MergeOptions: By is who acts (the audit's By); RoundRobin makes
// host-local's round-robin points replace the store's when the merge finds
// reservations the store did not hold (host-local was in charge and handed
// out addresses since the store's points were set), rather than fill only
// those missing.
type MergeOptions struct {
	By         string
	RoundRobin bool
}

// MergeHostLocal merges host-local's state in dir into the store so that
// no address in use there is handed out again: each reservation file is
// judged by DecideMerge. Imported records are committed (they were in use),
// keep their owner, and are attributed to the range set that contains them
// (-1 when none does), with Source SourceHostLocal (the store indexes them:
// Query.Imported). A conflict keeps the store's holder and is
// audited, one AuditImportConflict entry each; the imports are audited as
// one AuditImport entry. Nothing the store holds is released. A missing dir
// merges nothing.
//
// dir and the files read from it are trusted only by trustfs's contract: a
// dir or file that is a symlink, or that another user owns or can write, is
// refused (an error matching trustfs.ErrUntrusted naming it, its owner and
// mode, and the fix), and nothing is imported: importing another user's
// files would let them reserve or shape this network's addresses.
func MergeHostLocal(tx Store, dir, network string, sets []StoredRangeSet, o MergeOptions, now time.Time) (ImportResult, error) {
	var res ImportResult
	st, err := readHostLocal(dir)
	res.Stamp = st.stamp
	if err != nil {
		return res, err
	}
	for _, f := range st.files {
		cur, damaged := tx.Lookup(f.IP)
		switch DecideMerge(f, cur, damaged) {
		case MergeSame:
			res.Same++
		case MergeConflict:
			c := ImportConflict{File: f, Damaged: damaged != nil}
			if cur != nil {
				c.StoreContainerID, c.StoreIfName = cur.ContainerID, cur.IfName
			} else {
				c.StoreContainerID, c.StoreIfName = damaged.ContainerID, damaged.IfName
			}
			res.Conflicts = append(res.Conflicts, c)
			if err := tx.Audit(AuditEvent{Time: now, Action: AuditImportConflict, IP: f.IP, ContainerID: f.ContainerID, IfName: f.IfName,
				Reason: c.reason(dir), By: o.By}); err != nil {
				return res, err
			}
		case MergeImport:
			if err := tx.Put(importedRecord(f, network, sets, now)); err != nil {
				return res, err
			}
			res.Imported++
		}
	}
	// host-local's round-robin points: where the store has none; with
	// RoundRobin also over the store's, when host-local reserved something
	// the store did not hold (its ADDs moved them; its DELs alone do not).
	takeOver := o.RoundRobin && res.Imported+len(res.Conflicts) > 0
	for i, ip := range st.last {
		if cur, has := tx.LastReserved(i); !has || takeOver && cur != ip {
			if err := tx.SetLastReserved(i, ip); err != nil {
				return res, err
			}
		}
	}
	if res.Imported > 0 {
		if err := tx.Audit(AuditEvent{Time: now, Action: AuditImport, Reason: fmt.Sprintf("%d reservations from %s", res.Imported, dir), By: o.By}); err != nil {
			return res, err
		}
	}
	return res, nil
}

// importedRecord is the record a merge writes for host-local's reservation
// f: committed (it was in use), its owner, attributed to the range set that
// contains it (-1 when none does), Source SourceHostLocal.
func importedRecord(f HostLocalFile, network string, sets []StoredRangeSet, now time.Time) *Record {
	rec := &Record{
		IP: f.IP, RangeSet: -1, ContainerID: f.ContainerID, IfName: f.IfName,
		Network: network, State: StateCommitted, Source: SourceHostLocal, Created: now, Committed: now,
	}
	for si, set := range sets {
		if ri := rangeFor(set, f.IP); ri >= 0 {
			r := set.Ranges[ri]
			rec.RangeSet, rec.PrefixLen, rec.Gateway = si, r.Subnet.Bits(), r.Gateway
			break
		}
	}
	return rec
}

// hostLocalState is host-local's state as read from its directory: the
// reservation files in address order, the round-robin points, and the
// directory's stamp taken before anything was read (a change made while
// the files are read makes the next SyncHostLocal merge again).
type hostLocalState struct {
	files []HostLocalFile
	last  map[int]netip.Addr
	stamp DirStamp
}

// readHostLocal reads host-local's state in dir by trustfs's contract
// (MergeHostLocal's); a missing dir is an empty state.
func readHostLocal(dir string) (hostLocalState, error) {
	st := hostLocalState{last: map[int]netip.Addr{}}
	d, err := trustfs.OpenDir(dir)
	if errors.Is(err, os.ErrNotExist) || NoHostLocalDir(err) {
		return st, nil
	}
	if trustfs.IsUntrusted(err) {
		return st, fmt.Errorf("host-local state: %w", err)
	}
	if err != nil {
		return st, fmt.Errorf("reading host-local state %s: %w", dir, err)
	}
	defer d.Close()
	st.stamp = fdStamp(d.Fd())
	entries, err := d.Entries()
	if err != nil {
		return st, fmt.Errorf("reading host-local state %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if idx, ok := strings.CutPrefix(name, hostLocalLastPrefix); ok {
			i, err1 := strconv.Atoi(idx)
			data, err2 := d.ReadFile(name, hostLocalMaxFile)
			if trustfs.IsUntrusted(err2) {
				return st, fmt.Errorf("host-local state: %w", err2)
			}
			ip, err3 := netip.ParseAddr(strings.TrimSpace(string(data)))
			if err1 == nil && err2 == nil && err3 == nil {
				st.last[i] = ip.Unmap()
			}
			continue
		}
		ip, err := netip.ParseAddr(strings.ReplaceAll(name, "_", ":"))
		if err != nil {
			continue // "lock" and anything else that is not an address
		}
		data, err := d.ReadFile(name, hostLocalMaxFile)
		if trustfs.IsUntrusted(err) {
			return st, fmt.Errorf("host-local state: %w", err)
		}
		if errors.Is(err, os.ErrNotExist) {
			continue // host-local's DEL removed it since the listing
		}
		if err != nil {
			return st, fmt.Errorf("reading host-local reservation %s: %w", name, err)
		}
		id, ifname, _ := strings.Cut(strings.TrimSpace(string(data)), hostLocalLineBreak)
		st.files = append(st.files, HostLocalFile{IP: ip.Unmap(), ContainerID: strings.TrimSpace(id), IfName: strings.TrimSpace(ifname)})
	}
	slices.SortFunc(st.files, func(a, b HostLocalFile) int { return a.IP.Compare(b.IP) })
	return st, nil
}

// PendingHostLocal returns, for a store exported to host-local whose next
// write has not merged dir yet, the records that merge would import for
// attachment a: host-local's reservations of that attachment at
// addresses the store does not hold (MergeImport; a conflict is never the
// attachment's). It reads and writes nothing else, so a read-only verb
// (CHECK) sees an attachment host-local set up while it was in charge. A
// store never exported has none, nor one whose dir is unchanged since its
// last merge (SyncHostLocal would merge nothing).
func PendingHostLocal(tx Store, dir, network string, sets []StoredRangeSet, a Attachment) ([]*Record, error) {
	mark := tx.HostLocalMark()
	if !mark.Exported {
		return nil, nil
	}
	m := mark.Export
	if cur, err := statDir(dir); errors.Is(err, os.ErrNotExist) || err == nil && m.Seen.Valid() && cur == m.Seen {
		return nil, nil
	}
	st, err := readHostLocal(dir)
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, f := range st.files {
		if f.ContainerID != a.ContainerID || f.IfName != a.IfName && f.IfName != "" {
			continue
		}
		if cur, damaged := tx.Lookup(f.IP); DecideMerge(f, cur, damaged) == MergeImport {
			out = append(out, importedRecord(f, network, sets, time.Time{}))
		}
	}
	return out, nil
}

// reason is the conflict's audit reason: the file, and whom the store holds
// the address for.
func (c ImportConflict) reason(dir string) string {
	holder := fmt.Sprintf("container %q ifname %q", c.StoreContainerID, c.StoreIfName)
	if c.Damaged {
		holder = "a damaged record (" + holder + " as far as readable)"
	}
	return fmt.Sprintf("host-local's file %s/%s names this attachment; the store holds the address for %s: kept reserved for the store's holder, not handed out",
		dir, hostLocalFileName(c.File.IP), holder)
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

// ExportResult is what ExportHostLocal did: the reservation files written,
// and what it merged first (a store exported before: host-local may have
// acted since).
type ExportResult struct {
	Written int
	Merged  ImportResult
}

// ExportHostLocal writes the store's reservations, then extra, then the
// round-robin points to dir in host-local's format, for rolling back to
// host-local. Existing files for the same addresses are replaced; other files
// are left alone.
//
// A store exported before is first merged with dir (ImportNow, as by): what
// host-local reserved since is kept, and a file naming an address the store
// holds for another attachment (a conflict) is left as it is, so that
// host-local keeps it reserved too; it is reported in Merged. Once written,
// the store is marked exported (SetHostLocalMark, at now): from then on
// every plugin write first merges what host-local changes in dir
// (SyncHostLocal). tx must be a write transaction.
//
// dir (created 0755 when missing, its parents too) is used only by trustfs's
// contract: a dir that is a symlink, or that another user owns or can write,
// is refused before anything is written. Each file is written under a new
// random name (O_EXCL) and renamed into place relative to the directory
// opened: a link planted at a file's name, or at any predictable temporary
// name, is never written through.
func ExportHostLocal(tx Store, dir, network string, extra []HostLocalReservation, by string, now time.Time) (ExportResult, error) {
	var res ExportResult
	if mark := tx.HostLocalMark(); mark.Exported && mark.Imported {
		sets, err := tx.RangeSets()
		if err != nil && !errors.Is(err, ErrDamagedValue) {
			return res, err
		}
		if res.Merged, err = ImportNow(tx, dir, network, sets, by, now); err != nil {
			return res, err
		}
	}
	keep := make(map[netip.Addr]bool, len(res.Merged.Conflicts))
	for _, c := range res.Merged.Conflicts {
		keep[c.File.IP] = true
	}
	n, err := exportHostLocal(tx, dir, extra, keep, now)
	res.Written = n
	return res, err
}

func exportHostLocal(tx Store, dir string, extra []HostLocalReservation, keep map[netip.Addr]bool, now time.Time) (int, error) {
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
	all, err := tx.Records(Query{})
	if err != nil {
		return n, err
	}
	for _, r := range all {
		if keep[r.IP] {
			continue
		}
		if err := write(hostLocalFileName(r.IP), reservation(HostLocalReservation{r.IP, r.ContainerID, r.IfName})); err != nil {
			return n, err
		}
		n++
	}
	for _, r := range extra {
		if keep[r.IP] {
			continue
		}
		if err := write(hostLocalFileName(r.IP), reservation(r)); err != nil {
			return n, err
		}
		n++
	}
	sets, err := tx.RangeSets()
	switch {
	case errors.Is(err, ErrDamagedValue):
		// Without the range sets there are no round-robin points to write:
		// host-local then starts at each range's start. Every reservation is
		// written all the same.
	case err != nil:
		return n, err
	}
	for i := range sets {
		if ip, ok := tx.LastReserved(i); ok {
			if err := write(hostLocalLastPrefix+strconv.Itoa(i), ip.String()); err != nil {
				return n, err
			}
		}
	}
	mark := tx.HostLocalMark()
	mark.Exported, mark.Export = true, HostLocalExport{At: now, Seen: fdStamp(d.Fd()).settled(now)}
	return n, tx.SetHostLocalMark(mark, now)
}

// ReleaseHostLocalGone releases every record imported from host-local
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
//
// by is who acts (ByPlugin, ByDaemon).
func ReleaseHostLocalGone(tx Store, dir, by string, now time.Time) ([]*Record, error) {
	recs, err := tx.Records(Query{Imported: true})
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
		why := Why{Action: AuditHostLocalGone, Reason: "host-local reservation file removed (host-local DEL)", By: by}
		if err := ReleaseRecord(tx, r, why, now); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
