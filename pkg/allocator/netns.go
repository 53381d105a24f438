package allocator

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DirID is a directory's identity as the kernel gives it: the device and
// inode numbers (st_dev, st_ino) of stat(2), links followed, and its file
// handle (name_to_handle_at(2)). Two views of the node (mount namespaces,
// bind mounts, a hostPath volume) that show a directory with the same DirID
// show the same directory, whatever its path there.
//
// Device and inode numbers alone are reused: a tmpfs mounted in place of an
// unmounted one gets the freed device number and the same root inode, and
// ext4 gives a directory created in place of a removed one the freed inode.
// The file handle carries the inode's generation, which the filesystem draws
// anew for every inode it creates (tmpfs, ext4, xfs, btrfs: random or
// counted), so a directory created in place of another, or a new tmpfs, has
// another handle; unlike a mount's ID it is the same through every mount of
// the directory. A DirID without a handle (a filesystem that gives none, or
// a witness of an older plugin) is Weak: it never proves two directories
// the same (NetnsEvidenceOf). The zero DirID is "unknown" (no directory has
// inode 0).
type DirID struct {
	Dev    uint64     `json:"dev"`
	Ino    uint64     `json:"ino"`
	Handle FileHandle `json:"handle,omitempty"`
}

// FileHandle is a file handle as name_to_handle_at(2) returns it: its type
// (4 bytes, little-endian), then its bytes; "" when there is none. Shown in
// JSON and logs as hex.
type FileHandle string

// MarshalText is the handle in hex.
func (h FileHandle) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString([]byte(h))), nil }

// UnmarshalText reads MarshalText's form.
func (h *FileHandle) UnmarshalText(b []byte) error {
	raw, err := hex.DecodeString(string(b))
	if err != nil {
		return fmt.Errorf("file handle: %w", err)
	}
	*h = FileHandle(raw)
	return nil
}

// Known reports whether d names a directory.
func (d DirID) Known() bool { return d.Ino != 0 }

// Weak reports whether d names a directory by device and inode only (no
// file handle): numbers the kernel reuses.
func (d DirID) Weak() bool { return d.Known() && d.Handle == "" }

// Same reports whether d and o are known and the same directory. It is the
// only comparison of directory identities: unknown is never the same as
// anything, itself included. Weak identities compare by device and inode
// (what they have); NetnsEvidenceOf never lets a weak one prove anything.
func (d DirID) Same(o DirID) bool { return d.Known() && d == o }

// String is "dev:ino" (decimal), then ":" and the handle in hex when there
// is one, or "unknown".
func (d DirID) String() string {
	if !d.Known() {
		return "unknown"
	}
	if d.Handle == "" {
		return fmt.Sprintf("%d:%d", d.Dev, d.Ino)
	}
	return fmt.Sprintf("%d:%d:%x", d.Dev, d.Ino, string(d.Handle))
}

// DirIDOf stats path (following links) and reads its file handle; path must
// be a directory. A filesystem without file handles gives a Weak DirID.
func DirIDOf(path string) (DirID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return DirID{}, err
	}
	if !fi.IsDir() {
		return DirID{}, fmt.Errorf("%s is not a directory", path)
	}
	id, ok := dirIDOfInfo(fi)
	if !ok {
		return DirID{}, fmt.Errorf("%s: no device and inode numbers on this system", path)
	}
	id.Handle = fileHandle(path)
	return id, nil
}

// NsID is a namespace's identity as stat(2) of a path to it gives it (a
// runtime's bind mount of the namespace, or /proc/<pid>/ns/net): nsfs's
// device and the namespace's inode. The kernel gives a namespace's inode to
// no other namespace while it lives. The zero NsID is "unknown".
type NsID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Known reports whether n names something.
func (n NsID) Known() bool { return n.Ino != 0 }

// String is "dev:ino" (decimal), or "unknown".
func (n NsID) String() string {
	if !n.Known() {
		return "unknown"
	}
	return fmt.Sprintf("%d:%d", n.Dev, n.Ino)
}

// NetnsWitness is what the plugin saw, in the runtime's view of the node, of
// the netns a sandbox was given, when it wrote the sandbox's record (ADD).
//
// The contract (the death rule, NetnsEvidenceOf and NetnsGone, for every
// judge: the daemon, and the plugin when it frees a dead sandbox): "this
// sandbox's netns is gone, so the sandbox is dead" may be concluded from a
// view V of the node only when the record carries a witness whose directory
// identity is not Weak and which names its namespace (Netns), the netns
// existed when the record was written (Existed: a path that never existed in
// the plugin's view proves nothing by being missing), the netns path lies
// directly in the directory V reads, that directory has, in V, the identity
// Dir (handle included), an lstat of the path answers ENOENT, and no process
// or nsfs mount V can see still holds the namespace Netns. Anything else is
// doubt, and doubt never proves a death.
//
// The zero value is "no witness": a record written by an older plugin, or
// one whose netns is unnamed (NamedNetns) or whose directory could not be
// read.
type NetnsWitness struct {
	// Dir is the identity of filepath.Dir(netns) as the plugin saw it.
	Dir DirID `json:"dir,omitzero"`
	// Existed: the netns path existed when the record was written.
	Existed bool `json:"existed,omitempty"`
	// Netns is what lstat(2) of the netns path gave when it existed: for a
	// runtime's bind mount of a network namespace, nsfs's device and the
	// namespace's inode. Zero in a witness of an older plugin.
	Netns NsID `json:"netns,omitzero"`
}

// Known reports whether w was taken (its directory's identity is known).
func (w NetnsWitness) Known() bool { return w.Dir.Known() }

// Weak reports whether w is known but cannot prove a death: its directory
// has no file handle, or it existed without naming its namespace.
func (w NetnsWitness) Weak() bool {
	return w.Known() && (w.Dir.Weak() || (w.Existed && !w.Netns.Known()))
}

// NamedNetns reports whether netns is a named network namespace: an absolute
// path outside /proc (a runtime's bind mount such as /var/run/netns/cni-…).
// An empty path, a relative one or a /proc/<pid>/ns/net path is not: nothing
// about its directory tells whether the sandbox lives.
func NamedNetns(netns string) bool {
	if netns == "" || !filepath.IsAbs(netns) {
		return false
	}
	clean := filepath.Clean(netns)
	return clean != "/proc" && !strings.HasPrefix(clean, "/proc/") && filepath.Dir(clean) != clean
}

// WitnessNetns takes the plugin's witness of netns (a stat and a file handle
// of its directory, one lstat of the netns itself: none opens it). It
// returns the zero witness when netns is not a named netns or its directory
// cannot be read.
func WitnessNetns(netns string) NetnsWitness {
	if !NamedNetns(netns) {
		return NetnsWitness{}
	}
	clean := filepath.Clean(netns)
	dir, err := DirIDOf(filepath.Dir(clean))
	if err != nil {
		return NetnsWitness{}
	}
	w := NetnsWitness{Dir: dir}
	if fi, err := os.Lstat(clean); err == nil {
		w.Existed = true
		w.Netns = nsIDOfInfo(fi)
	}
	return w
}

// NetnsEvidence is what a record's netns can prove from one view of the node
// (NetnsEvidenceOf, then NetnsGone). Its String is the class's name in logs
// and tests; Doubt says in words why it proves nothing.
type NetnsEvidence int

const (
	// NetnsUnnamed: the record names no named netns; nothing to judge.
	NetnsUnnamed NetnsEvidence = iota
	// NetnsNoWitness: the record carries no witness (written by an older
	// plugin, or its netns directory could not be read at ADD).
	NetnsNoWitness
	// NetnsNeverExisted: the netns did not exist when the record was written.
	NetnsNeverExisted
	// NetnsElsewhere: the netns path does not lie directly in the directory
	// the judge reads.
	NetnsElsewhere
	// NetnsDirUnseen: the judge could not read its directory's identity.
	NetnsDirUnseen
	// NetnsOtherDir: the judge's directory is not the one the plugin saw.
	NetnsOtherDir
	// NetnsProvable: the judge sees the plugin's directory; the netns being
	// missing there, while nothing holds its namespace (NetnsGone), proves
	// the runtime removed it.
	NetnsProvable
	// NetnsReusableID: the directory is known by numbers the kernel reuses
	// only (no file handle on one side, or a witness without its
	// namespace's identity: an older plugin's record).
	NetnsReusableID
	// NetnsHeld: the netns path is gone, but a process or an nsfs mount
	// still holds its namespace (NetnsGone): the sandbox lives.
	NetnsHeld
	// NetnsHoldersUnseen: the netns path is gone, but the judge could not
	// read what holds namespaces (its /proc).
	NetnsHoldersUnseen
)

// netnsClasses is every evidence class's name (String: logs, `leaks`,
// tests) and doubt (Doubt: why it proves nothing from a judge's view; nil
// when it may prove a death or there is nothing to doubt). The names and
// words of existing classes never change.
var netnsClasses = [...]struct {
	name  string
	doubt func(r *Record, v NetnsJudgeView) string
}{
	NetnsUnnamed: {"unnamed", nil},
	NetnsNoWitness: {"no_witness", func(*Record, NetnsJudgeView) string {
		return "the record carries no identity of its netns directory (written by an older plugin, or the directory could not be read at ADD)"
	}},
	NetnsNeverExisted: {"never_existed", func(*Record, NetnsJudgeView) string {
		return "its netns did not exist when the record was written"
	}},
	NetnsElsewhere: {"elsewhere", func(_ *Record, v NetnsJudgeView) string {
		return fmt.Sprintf("its netns is not in --netns-dir %s", v.Dir)
	}},
	NetnsDirUnseen: {"dir_unseen", func(_ *Record, v NetnsJudgeView) string {
		return fmt.Sprintf("--netns-dir %s cannot be read: %v", v.Dir, v.Err)
	}},
	NetnsOtherDir: {"other_dir", func(r *Record, v NetnsJudgeView) string {
		return fmt.Sprintf("--netns-dir %s is directory %s, not %s where the plugin saw the netns (a wrong mount)", v.Dir, v.ID, r.NetnsWitness.Dir)
	}},
	NetnsProvable: {"provable", nil},
	NetnsReusableID: {"reusable_id", func(r *Record, v NetnsJudgeView) string {
		return fmt.Sprintf("its netns directory is known as %s and --netns-dir %s as %s: device and inode numbers without a file handle or the namespace's identity (an older plugin's record, or a filesystem without file handles), which the kernel reuses for a directory or tmpfs made in place of another", r.NetnsWitness.Dir, v.Dir, v.ID)
	}},
	NetnsHeld: {"held", func(r *Record, _ NetnsJudgeView) string {
		return fmt.Sprintf("its netns path is gone but its network namespace (nsfs %s) is still held by a process or a mount: the sandbox lives", r.NetnsWitness.Netns)
	}},
	NetnsHoldersUnseen: {"holders_unseen", func(_ *Record, v NetnsJudgeView) string {
		return fmt.Sprintf("its netns path is gone but what holds network namespaces cannot be read: %v", v.HoldersErr)
	}},
}

func (e NetnsEvidence) known() bool { return e >= 0 && int(e) < len(netnsClasses) }

// String names the evidence for logs and tests.
func (e NetnsEvidence) String() string {
	if e.known() {
		return netnsClasses[e].name
	}
	return fmt.Sprintf("NetnsEvidence(%d)", int(e))
}

// NetnsJudgeView is what a judge saw, for Doubt's words: the netns
// directory it reads (the daemon's --netns-dir), its identity there and the
// error reading it, and the error reading what holds namespaces.
type NetnsJudgeView struct {
	Dir        string
	ID         DirID
	Err        error
	HoldersErr error
}

// Doubt says why a record r whose netns has evidence e proves nothing from
// view v, for logs and `leaks` ("" when it may: NetnsProvable, or when the
// record names no netns: there is nothing to doubt).
func (e NetnsEvidence) Doubt(r *Record, v NetnsJudgeView) string {
	switch {
	case !e.known():
		return "unknown netns evidence " + e.String()
	case netnsClasses[e].doubt == nil:
		return ""
	}
	return netnsClasses[e].doubt(r, v)
}

// NetnsEvidenceOf applies NetnsWitness's contract, without I/O: what r's
// netns can prove to a judge that reads directory dir and sees it with
// identity id (zero: could not be read). Only NetnsProvable lets a missing
// netns prove a death, and only after NetnsGone.
func NetnsEvidenceOf(r *Record, dir string, id DirID) NetnsEvidence {
	w := r.NetnsWitness
	switch {
	case !NamedNetns(r.Netns):
		return NetnsUnnamed
	case !w.Known():
		return NetnsNoWitness
	case !w.Existed:
		return NetnsNeverExisted
	case dir == "" || filepath.Dir(filepath.Clean(r.Netns)) != filepath.Clean(dir):
		return NetnsElsewhere
	case !id.Known():
		return NetnsDirUnseen
	case w.Dir.Dev != id.Dev || w.Dir.Ino != id.Ino:
		return NetnsOtherDir
	case w.Weak() || id.Weak():
		return NetnsReusableID
	case !w.Dir.Same(id):
		return NetnsOtherDir
	}
	return NetnsProvable
}

// NetnsView is a judge's I/O on the runtime's view of the node (the
// plugin's at ADD; the daemon's in its netns directory): a
// directory's identity (DirIDOf), an lstat of a netns path (nil: it is
// there) and the namespaces something still holds (ReadNetnsHolders). None
// opens a netns.
type NetnsView interface {
	DirID(dir string) (DirID, error)
	Lstat(path string) error
	Holders() (NetnsHolders, error)
}

// OSNetnsView is the NetnsView of the calling process: its paths, and the
// namespaces held as the proc filesystem at ProcDir shows them ("" is
// /proc: the plugin's, the runtime's pid namespace, which it shares; the
// daemon passes its --proc-dir).
type OSNetnsView struct {
	ProcDir string
}

// Holders is ReadNetnsHolders(ProcDir).
func (v OSNetnsView) Holders() (NetnsHolders, error) {
	if v.ProcDir == "" {
		return ReadNetnsHolders("/proc")
	}
	return ReadNetnsHolders(v.ProcDir)
}

// DirID is DirIDOf(dir).
func (OSNetnsView) DirID(dir string) (DirID, error) { return DirIDOf(dir) }

// Lstat is os.Lstat(path)'s error.
func (OSNetnsView) Lstat(path string) error {
	_, err := os.Lstat(path)
	return err
}

// NetnsHolders is the set of network namespaces that something a judge can
// see still holds: a thread's namespace, or an nsfs mount of one
// (ReadNetnsHolders).
type NetnsHolders map[NsID]struct{}

// NetnsGone is the end of the death rule, without I/O: r's netns, whose
// evidence is ev (NetnsEvidenceOf), is gone only when ev is NetnsProvable,
// lstatErr (the lstat of r's netns path in the judge's view) is ENOENT and
// r's namespace is not among held (read with heldErr). It returns the
// evidence after the check (NetnsHeld or NetnsHoldersUnseen when the path
// is gone but the namespace may live) and whether the netns is gone.
func NetnsGone(ev NetnsEvidence, r *Record, lstatErr error, held NetnsHolders, heldErr error) (NetnsEvidence, bool) {
	if ev != NetnsProvable || !errors.Is(lstatErr, fs.ErrNotExist) {
		return ev, false
	}
	if heldErr != nil {
		return NetnsHoldersUnseen, false
	}
	if _, ok := held[r.NetnsWitness.Netns]; ok {
		return NetnsHeld, false
	}
	return NetnsProvable, true
}
