package allocator

import (
	"errors"
	"io/fs"
	"strings"
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
		{"the same directory, handles equal", DirID{Dev: 40, Ino: 1, Handle: "h1"}, DirID{Dev: 40, Ino: 1, Handle: "h1"}, true},
		{"a new tmpfs with the freed device and the same root inode: another handle", DirID{Dev: 40, Ino: 1, Handle: "h1"}, DirID{Dev: 40, Ino: 1, Handle: "h2"}, false},
		{"a handle on one side only", DirID{Dev: 40, Ino: 1, Handle: "h1"}, DirID{Dev: 40, Ino: 1}, false},
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

// NetnsEvidenceOf is the one rule for judging a record's netns from a view
// of the node: only a witness taken in a directory the judge provably reads
// lets a missing netns prove a death.
func TestNetnsEvidenceOf(t *testing.T) {
	runtimeDir := DirID{Dev: 25, Ino: 1000, Handle: "\x01\x00\x00\x00gen1"}
	seen := NetnsWitness{Dir: runtimeDir, Existed: true, Netns: NsID{Dev: 4, Ino: 4026532177}}
	numbersOnly := DirID{Dev: 25, Ino: 1000}
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
		{"a new tmpfs given the freed device and the same root inode: another handle", rec("/var/run/netns/cni-1", seen), "/var/run/netns", DirID{Dev: 25, Ino: 1000, Handle: "\x01\x00\x00\x00gen2"}, NetnsOtherDir},
		{"an older plugin's witness: numbers only", rec("/var/run/netns/cni-1", NetnsWitness{Dir: numbersOnly, Existed: true}), "/var/run/netns", runtimeDir, NetnsReusableID},
		{"the judge's filesystem gives no handle", rec("/var/run/netns/cni-1", seen), "/var/run/netns", numbersOnly, NetnsReusableID},
		{"a witness that existed without naming its namespace", rec("/var/run/netns/cni-1", NetnsWitness{Dir: runtimeDir, Existed: true}), "/var/run/netns", runtimeDir, NetnsReusableID},
		{"an older plugin's witness in another directory", rec("/var/run/netns/cni-1", NetnsWitness{Dir: DirID{Dev: 99, Ino: 1000}, Existed: true}), "/var/run/netns", runtimeDir, NetnsOtherDir},
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

// NetnsGone ends the death rule: a provable netns whose path is gone is gone
// only while nothing holds its namespace and what holds namespaces could be
// read; every other evidence passes through unchanged.
func TestNetnsGone(t *testing.T) {
	ns := NsID{Dev: 4, Ino: 4026532177}
	r := &Record{Netns: "/var/run/netns/cni-1", NetnsWitness: NetnsWitness{Existed: true, Netns: ns}}
	other := NetnsHolders{{Dev: 4, Ino: 4026531833}: {}}
	held := NetnsHolders{ns: {}, {Dev: 4, Ino: 4026531833}: {}}
	unread := errors.New("no /proc")
	cases := []struct {
		name    string
		ev      NetnsEvidence
		lstat   error
		held    NetnsHolders
		heldErr error
		want    NetnsEvidence
		gone    bool
	}{
		{"gone, held by nothing", NetnsProvable, fs.ErrNotExist, other, nil, NetnsProvable, true},
		{"gone, no holders at all", NetnsProvable, fs.ErrNotExist, NetnsHolders{}, nil, NetnsProvable, true},
		{"gone, namespace still held", NetnsProvable, fs.ErrNotExist, held, nil, NetnsHeld, false},
		{"gone, holders unreadable", NetnsProvable, fs.ErrNotExist, nil, unread, NetnsHoldersUnseen, false},
		{"present", NetnsProvable, nil, other, nil, NetnsProvable, false},
		{"lstat doubt (EACCES)", NetnsProvable, fs.ErrPermission, other, nil, NetnsProvable, false},
		{"reusable numbers, gone", NetnsReusableID, fs.ErrNotExist, other, nil, NetnsReusableID, false},
		{"other dir, gone", NetnsOtherDir, fs.ErrNotExist, other, nil, NetnsOtherDir, false},
		{"no witness, gone", NetnsNoWitness, fs.ErrNotExist, other, nil, NetnsNoWitness, false},
	}
	for _, tc := range cases {
		ev, gone := NetnsGone(tc.ev, r, tc.lstat, tc.held, tc.heldErr)
		if ev != tc.want || gone != tc.gone {
			t.Errorf("%s: NetnsGone = %v, %v; want %v, %v", tc.name, ev, gone, tc.want, tc.gone)
		}
	}
}

// Every class has a name and, except the two that doubt nothing, words.
func TestNetnsEvidenceWords(t *testing.T) {
	r := &Record{Netns: "/var/run/netns/cni-1", NetnsWitness: NetnsWitness{Dir: DirID{Dev: 25, Ino: 1000}, Existed: true}}
	v := NetnsJudgeView{Dir: "/var/run/netns", ID: DirID{Dev: 25, Ino: 1000, Handle: "h"}}
	seen := map[string]bool{}
	for e := NetnsUnnamed; e <= NetnsHoldersUnseen; e++ {
		name := e.String()
		if strings.HasPrefix(name, "NetnsEvidence(") || seen[name] {
			t.Errorf("class %d: name %q", int(e), name)
		}
		seen[name] = true
		if d := e.Doubt(r, v); (d == "") != (e == NetnsProvable || e == NetnsUnnamed) || strings.HasPrefix(d, "unknown") {
			t.Errorf("%s: Doubt = %q", e, d)
		}
	}
}
