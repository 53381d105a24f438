package daemon

import (
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// A --netns-dir whose file handle cannot be read (here /proc, a filesystem
// that gives none) is unseen, with the reason: its device and inode alone
// would let a directory made in its place pass for it. A directory with a
// handle is seen with it.
func TestNetnsDirViewNeedsAFileHandle(t *testing.T) {
	v := (&Sweeper{Opts: &Options{NetnsDir: "/proc/self"}}).netnsDirView()
	if v.ID.Known() || v.Err == nil || !strings.Contains(v.Err.Error(), "no file handle") {
		t.Errorf("--netns-dir on procfs: %+v; want unseen, saying it has no file handle", v)
	}
	r := &allocator.Record{Netns: "/var/run/netns/cni-1", NetnsWitness: allocator.NetnsWitness{Dir: allocator.DirID{Dev: 1, Ino: 2, Handle: "h"}, Existed: true, Netns: allocator.NsID{Dev: 4, Ino: 5}}}
	if e := allocator.NetnsEvidenceOf(r, "/var/run/netns", v.ID); e != allocator.NetnsDirUnseen {
		t.Errorf("evidence from that view: %v, want %v", e, allocator.NetnsDirUnseen)
	}
	dir := t.TempDir()
	if v := (&Sweeper{Opts: &Options{NetnsDir: dir}}).netnsDirView(); v.Err != nil || v.ID.Handle == "" {
		if _, err := allocator.ReadFileHandle(dir); err != nil {
			t.Skipf("the test's temporary directory gives no file handle: %v", err)
		}
		t.Errorf("--netns-dir %s: %+v; want its identity with its handle", dir, v)
	}
}
