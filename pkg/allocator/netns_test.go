package allocator

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestDirIDSame(t *testing.T) {
	a := DirID{Dev: 64769, Ino: 1234}
	cases := []struct {
		name string
		x, y DirID
		want bool
	}{
		{"the same directory", a, a, true},
		{"another inode on the same device (a directory created in its place)", a, DirID{Dev: a.Dev, Ino: 99}, false},
		{"the same inode number on another device (a tmpfs mounted over it)", a, DirID{Dev: 40, Ino: a.Ino}, false},
		{"unknown on one side", a, DirID{}, false},
		{"unknown on the other side", DirID{}, a, false},
		{"unknown is not the same as unknown", DirID{}, DirID{}, false},
		{"device 0 is a device", DirID{Ino: 7}, DirID{Ino: 7}, true},
	}
	for _, tc := range cases {
		if got := tc.x.Same(tc.y); got != tc.want {
			t.Errorf("%s: %v.Same(%v) = %v, want %v", tc.name, tc.x, tc.y, got, tc.want)
		}
	}
}

func TestNamedNetns(t *testing.T) {
	for path, want := range map[string]bool{
		"/var/run/netns/cni-1":         true,
		"/run/netns/../netns/cni-1":    true,
		"/run/containerd/x/netns/cni1": true,
		"":                             false,
		"cni-1":                        false,
		"netns/cni-1":                  false,
		"/proc/123/ns/net":             false,
		"/proc/self/ns/net":            false,
		"/proc":                        false,
		"/":                            false,
		"/procfs/netns/cni-1":          true,
	} {
		if got := NamedNetns(path); got != want {
			t.Errorf("NamedNetns(%q) = %v, want %v", path, got, want)
		}
	}
}

// The witness is one stat of the directory as the caller sees it: its
// identity is the one stat(2) gives, the netns's existence is recorded, and
// nothing is recorded for what is not a named netns or a directory that
// cannot be read.
func TestWitnessNetns(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := DirID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
	present := filepath.Join(dir, "cni-present")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, netns string
		want        NetnsWitness
	}{
		{"a netns that exists", present, NetnsWitness{Dir: want, Existed: true}},
		{"a netns that does not exist", filepath.Join(dir, "cni-absent"), NetnsWitness{Dir: want}},
		{"through a link to the directory: the directory's identity", filepath.Join(link, "cni-present"), NetnsWitness{Dir: want, Existed: true}},
		{"a directory that does not exist", filepath.Join(dir, "nodir", "cni-1"), NetnsWitness{}},
		{"a file in place of the directory", filepath.Join(present, "cni-1"), NetnsWitness{}},
		{"empty", "", NetnsWitness{}},
		{"a /proc path", "/proc/1/ns/net", NetnsWitness{}},
		{"relative", "cni-present", NetnsWitness{}},
	}
	for _, tc := range cases {
		if got := WitnessNetns(tc.netns); got != tc.want {
			t.Errorf("%s: WitnessNetns(%q) = %+v, want %+v", tc.name, tc.netns, got, tc.want)
		}
	}
	if id, err := DirIDOf(present); err == nil {
		t.Errorf("DirIDOf(a file) = %v, want an error", id)
	}
}

// NetnsEvidenceOf is the one rule for judging a record's netns from a view
// of the node: only a witness taken in a directory the judge provably reads
// lets a missing netns prove a death.
func TestNetnsEvidenceOf(t *testing.T) {
	runtimeDir := DirID{Dev: 25, Ino: 1000}
	seen := NetnsWitness{Dir: runtimeDir, Existed: true}
	rec := func(netns string, w NetnsWitness) *Record { return &Record{Netns: netns, NetnsWitness: w} }
	cases := []struct {
		name string
		r    *Record
		dir  string
		id   DirID
		want NetnsEvidence
	}{
		{"identity matches", rec("/var/run/netns/cni-1", seen), "/var/run/netns", runtimeDir, NetnsProvable},
		{"identity matches, dir given with a trailing slash", rec("/var/run/netns/cni-1", seen), "/var/run/netns/", runtimeDir, NetnsProvable},
		{"an empty tmpfs over the dir: another device", rec("/var/run/netns/cni-1", seen), "/var/run/netns", DirID{Dev: 99, Ino: 1000}, NetnsOtherDir},
		{"a directory created in its place: another inode", rec("/var/run/netns/cni-1", seen), "/var/run/netns", DirID{Dev: 25, Ino: 1001}, NetnsOtherDir},
		{"the judge could not stat its dir", rec("/var/run/netns/cni-1", seen), "/var/run/netns", DirID{}, NetnsDirUnseen},
		{"a record written before witnesses (legacy)", rec("/var/run/netns/cni-1", NetnsWitness{}), "/var/run/netns", runtimeDir, NetnsNoWitness},
		{"legacy record, judge's dir unknown", rec("/var/run/netns/cni-1", NetnsWitness{}), "/var/run/netns", DirID{}, NetnsNoWitness},
		{"the netns did not exist at ADD", rec("/var/run/netns/cni-1", NetnsWitness{Dir: runtimeDir}), "/var/run/netns", runtimeDir, NetnsNeverExisted},
		{"netns in a subdirectory of the judge's dir", rec("/var/run/netns/sub/cni-1", seen), "/var/run/netns", runtimeDir, NetnsElsewhere},
		{"netns in another directory", rec("/run/other/cni-1", seen), "/var/run/netns", runtimeDir, NetnsElsewhere},
		{"a path that leaves the dir with ..", rec("/var/run/netns/../other/cni-1", seen), "/var/run/netns", runtimeDir, NetnsElsewhere},
		{"a prefix that is not the dir", rec("/var/run/netnsX/cni-1", seen), "/var/run/netns", runtimeDir, NetnsElsewhere},
		{"no judge's dir", rec("/var/run/netns/cni-1", seen), "", runtimeDir, NetnsElsewhere},
		{"a /proc netns", rec("/proc/42/ns/net", seen), "/proc/42/ns", runtimeDir, NetnsUnnamed},
		{"no netns", rec("", NetnsWitness{}), "/var/run/netns", runtimeDir, NetnsUnnamed},
	}
	for _, tc := range cases {
		if got := NetnsEvidenceOf(tc.r, tc.dir, tc.id); got != tc.want {
			t.Errorf("%s: NetnsEvidenceOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}
