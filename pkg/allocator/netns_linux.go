package allocator

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fileHandle is path's file handle, or "" when it cannot be read.
func fileHandle(path string) FileHandle {
	h, _ := ReadFileHandle(path)
	return h
}

// ReadFileHandle reads path's file handle (name_to_handle_at(2), links
// followed). It fails on a filesystem that gives none (EOPNOTSUPP) and where
// a seccomp profile forbids the call (EPERM: containerd's RuntimeDefault
// before 1.6.22/1.7.3 without CAP_SYS_ADMIN).
func ReadFileHandle(path string) (FileHandle, error) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		return "", &os.PathError{Op: "name_to_handle_at", Path: path, Err: err}
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(h.Type()))
	return FileHandle(append(b, h.Bytes()...)), nil
}

// ReadNetnsHolders reads, from procDir (the node's /proc in the judge's
// view), the network namespaces that a live thread is in (every thread's
// <pid>/task/<tid>/ns/net, stat'ed: nsfs's device and the namespace's inode)
// and that no nsfs mount names (<pid>/mountinfo of every mount namespace
// those processes are in, read once per mount namespace). A namespace bound
// at a path is that path's: a runtime binds each sandbox's namespace at the
// sandbox's own path, and the kernel gives a dead namespace's inode number
// to the next one at once, so a live namespace bound elsewhere with a dead
// record's number is another sandbox's (a judged record's own path is gone).
// A process or thread that exits, or whose namespace cannot be read, during
// the walk is skipped; only a procDir that cannot be listed is an error. It
// sees what the judge's pid namespace sees (the plugin runs in the
// runtime's; the daemon, in a pod without the host's pid namespace, sees its
// own processes and the nsfs mounts of its mount namespace). A namespace
// held only by an open descriptor or a socket is not seen.
//
// It reads every process: the plugin calls it only when it is about to
// release a record, the daemon once a sweep that would reclaim one.
func ReadNetnsHolders(procDir string) (NetnsHolders, error) {
	pids, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procDir, err)
	}
	held, mounted := NetnsHolders{}, NetnsHolders{}
	mntSeen := map[uint64]bool{}
	var st unix.Stat_t
	for _, p := range pids {
		if !isPid(p.Name()) {
			continue
		}
		pdir := filepath.Join(procDir, p.Name())
		if tasks, err := os.ReadDir(filepath.Join(pdir, "task")); err == nil {
			for _, t := range tasks {
				if unix.Stat(filepath.Join(pdir, "task", t.Name(), "ns", "net"), &st) == nil {
					held[NsID{Dev: uint64(st.Dev), Ino: st.Ino}] = struct{}{}
				}
			}
		} else if unix.Stat(filepath.Join(pdir, "ns", "net"), &st) == nil {
			held[NsID{Dev: uint64(st.Dev), Ino: st.Ino}] = struct{}{}
		}
		if unix.Stat(filepath.Join(pdir, "ns", "mnt"), &st) != nil || mntSeen[st.Ino] {
			continue
		}
		mntSeen[st.Ino] = true
		if b, err := os.ReadFile(filepath.Join(pdir, "mountinfo")); err == nil {
			addNsfsMounts(mounted, b)
		}
	}
	for id := range mounted {
		delete(held, id)
	}
	return held, nil
}

func isPid(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// addNsfsMounts adds the network namespaces mounted in a mountinfo (proc(5)):
// lines whose filesystem type is nsfs and whose root is "net:[<inode>]".
func addNsfsMounts(held NetnsHolders, mountinfo []byte) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "nsfs ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 4 {
			continue
		}
		ino, ok := strings.CutPrefix(f[3], "net:[")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64)
		majS, minS, ok := strings.Cut(f[2], ":")
		if err != nil || !ok {
			continue
		}
		maj, err1 := strconv.ParseUint(majS, 10, 32)
		min, err2 := strconv.ParseUint(minS, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		held[NsID{Dev: unix.Mkdev(uint32(maj), uint32(min)), Ino: n}] = struct{}{}
	}
}
