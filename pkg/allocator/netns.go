package allocator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DirID is a directory's identity as the kernel gives it: the device and
// inode numbers (st_dev, st_ino) of stat(2), links followed. Two views of the
// node (mount namespaces, bind mounts, a hostPath volume) that show a
// directory with the same DirID show the same directory, whatever its path
// there; a directory created in its place, an empty tmpfs mounted over it or
// a hostPath that names another directory has another DirID. The zero DirID
// is "unknown" (no directory has inode 0).
type DirID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Known reports whether d names a directory.
func (d DirID) Known() bool { return d.Ino != 0 }

// Same reports whether d and o are known and the same directory. It is the
// only comparison of directory identities: unknown is never the same as
// anything, itself included.
func (d DirID) Same(o DirID) bool { return d.Known() && d == o }

// String is "dev:ino" (decimal), or "unknown".
func (d DirID) String() string {
	if !d.Known() {
		return "unknown"
	}
	return fmt.Sprintf("%d:%d", d.Dev, d.Ino)
}

// DirIDOf stats path (following links) and returns its identity; path must
// be a directory.
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
	return id, nil
}

// NetnsWitness is what the plugin saw, in the runtime's view of the node, of
// the netns a sandbox was given, when it wrote the sandbox's record (ADD).
//
// The contract: "this sandbox's netns is gone, so the sandbox is dead" may be
// concluded from a view V of the node only when the record carries a witness
// (Dir known), the netns existed when the record was written (Existed: a path
// that never existed in the plugin's view proves nothing by being missing),
// the netns path lies directly in the directory V reads, and that directory
// has, in V, the identity Dir. Anything else is doubt, and doubt never proves
// a death (NetnsEvidenceOf is that rule, for every judge: the daemon, and the
// plugin when it frees a dead sandbox of the same pod).
//
// The zero value is "no witness": a record written by an older plugin, or
// one whose netns is unnamed (NamedNetns) or whose directory could not be
// read.
type NetnsWitness struct {
	// Dir is the identity of filepath.Dir(netns) as the plugin saw it.
	Dir DirID `json:"dir,omitzero"`
	// Existed: the netns path existed when the record was written.
	Existed bool `json:"existed,omitempty"`
}

// Known reports whether w was taken (its directory's identity is known).
func (w NetnsWitness) Known() bool { return w.Dir.Known() }

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

// WitnessNetns takes the plugin's witness of netns (one stat of its
// directory, one lstat of the netns itself: neither opens it). It returns
// the zero witness when netns is not a named netns or its directory cannot
// be read.
func WitnessNetns(netns string) NetnsWitness {
	if !NamedNetns(netns) {
		return NetnsWitness{}
	}
	clean := filepath.Clean(netns)
	dir, err := DirIDOf(filepath.Dir(clean))
	if err != nil {
		return NetnsWitness{}
	}
	_, err = os.Lstat(clean)
	return NetnsWitness{Dir: dir, Existed: err == nil}
}

// NetnsEvidence is what a record's netns can prove from one view of the node
// (NetnsEvidenceOf).
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
	// missing there proves the runtime removed it.
	NetnsProvable
)

// String names the evidence for logs and tests.
func (e NetnsEvidence) String() string {
	switch e {
	case NetnsUnnamed:
		return "unnamed"
	case NetnsNoWitness:
		return "no_witness"
	case NetnsNeverExisted:
		return "never_existed"
	case NetnsElsewhere:
		return "elsewhere"
	case NetnsDirUnseen:
		return "dir_unseen"
	case NetnsOtherDir:
		return "other_dir"
	case NetnsProvable:
		return "provable"
	}
	return fmt.Sprintf("NetnsEvidence(%d)", int(e))
}

// NetnsEvidenceOf applies NetnsWitness's contract: what r's netns can prove
// to a judge that reads directory dir and sees it with identity id (zero:
// could not be read). Only NetnsProvable lets a missing netns prove a death.
func NetnsEvidenceOf(r *Record, dir string, id DirID) NetnsEvidence {
	switch {
	case !NamedNetns(r.Netns):
		return NetnsUnnamed
	case !r.NetnsWitness.Known():
		return NetnsNoWitness
	case !r.NetnsWitness.Existed:
		return NetnsNeverExisted
	case dir == "" || filepath.Dir(filepath.Clean(r.Netns)) != filepath.Clean(dir):
		return NetnsElsewhere
	case !id.Known():
		return NetnsDirUnseen
	case !r.NetnsWitness.Dir.Same(id):
		return NetnsOtherDir
	}
	return NetnsProvable
}
