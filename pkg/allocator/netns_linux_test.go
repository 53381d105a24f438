package allocator

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

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
	if h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0); err == nil {
		want.Handle = FileHandle(append([]byte{byte(h.Type()), byte(h.Type() >> 8), byte(h.Type() >> 16), byte(h.Type() >> 24)}, h.Bytes()...))
	}
	present := filepath.Join(dir, "cni-present")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(present, &st); err != nil {
		t.Fatal(err)
	}
	file := NsID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, netns string
		want        NetnsWitness
	}{
		{"a netns that exists", present, NetnsWitness{Dir: want, Existed: true, Netns: file}},
		{"a netns that does not exist", filepath.Join(dir, "cni-absent"), NetnsWitness{Dir: want}},
		{"through a link to the directory: the directory's identity", filepath.Join(link, "cni-present"), NetnsWitness{Dir: want, Existed: true, Netns: file}},
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

// The walk sees the namespaces of live threads and of nsfs mounts.
func TestReadNetnsHolders(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err != nil {
		t.Skipf("no /proc/self/ns/net: %v", err)
	}
	held, err := ReadNetnsHolders("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held[NsID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}]; !ok {
		t.Errorf("ReadNetnsHolders does not list this process's namespace %d:%d (%d namespaces)", st.Dev, st.Ino, len(held))
	}
	if _, err := ReadNetnsHolders(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("ReadNetnsHolders of a missing /proc: no error")
	}
}

func TestNsfsMounts(t *testing.T) {
	mi := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
43 42 0:4 net:[4026532177] /run/netns/cni-a rw shared:2 - nsfs nsfs rw
44 42 0:4 net:[4026532300] /run/netns/with\040space rw shared:2 - nsfs nsfs rw
45 42 0:4 mnt:[4026532400] /run/mntns rw shared:2 - nsfs nsfs rw
46 42 0:55 net:[4026532500] /x rw - tmpfs tmpfs rw
bad line
`
	held := NetnsHolders{}
	addNsfsMounts(held, []byte(mi))
	want := NetnsHolders{{Dev: unix.Mkdev(0, 4), Ino: 4026532177}: {}, {Dev: unix.Mkdev(0, 4), Ino: 4026532300}: {}}
	if len(held) != len(want) {
		t.Fatalf("nsfs mounts %v, want %v", held, want)
	}
	for k := range want {
		if _, ok := held[k]; !ok {
			t.Errorf("nsfs mounts %v lack %v", held, k)
		}
	}
}

// The walk an ADD makes only when it is about to release a record, and the
// daemon once a sweep that would reclaim one.
func BenchmarkReadNetnsHolders(b *testing.B) {
	for b.Loop() {
		if _, err := ReadNetnsHolders("/proc"); err != nil {
			b.Fatal(err)
		}
	}
}

// A namespace a thread is in keeps a dead record only while no nsfs mount
// names it: a namespace bound at a path is that path's sandbox's (the
// kernel gives a dead namespace's inode number to the next one at once).
// The /proc here is made of files; their device and inode stand in for
// nsfs's.
func TestReadNetnsHoldersSkipsBoundNamespaces(t *testing.T) {
	proc := t.TempDir()
	mk := func(path string) NsID {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return NsID{Dev: uint64(st.Dev), Ino: st.Ino}
	}
	bound := mk(filepath.Join(proc, "10", "task", "10", "ns", "net"))   // a sandbox's pause, its netns bound
	unbound := mk(filepath.Join(proc, "11", "task", "11", "ns", "net")) // a process in a namespace no mount names
	mk(filepath.Join(proc, "10", "ns", "mnt"))
	mi := fmt.Sprintf("43 42 %d:%d net:[%d] /run/netns/cni-a rw shared:2 - nsfs nsfs rw\n",
		unix.Major(bound.Dev), unix.Minor(bound.Dev), bound.Ino)
	if err := os.WriteFile(filepath.Join(proc, "10", "mountinfo"), []byte(mi), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := ReadNetnsHolders(proc)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held[bound]; ok {
		t.Errorf("a namespace bound at /run/netns/cni-a is held for a dead record: %v", held)
	}
	if _, ok := held[unbound]; !ok {
		t.Errorf("a namespace a thread is in and no mount names is not held: %v", held)
	}
}
