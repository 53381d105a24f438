//go:build unix

package allocator

import (
	"os"

	"golang.org/x/sys/unix"
)

// statDir is the stamp of the directory at path (never followed if a
// link: a link's own stamp is taken, which the merge then refuses).
func statDir(path string) (DirStamp, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return DirStamp{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return stampOf(&st), nil
}

// fdStamp is the stamp of the directory open as fd (zero when fstat fails).
func fdStamp(fd int) DirStamp {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return DirStamp{}
	}
	return stampOf(&st)
}

func stampOf(st *unix.Stat_t) DirStamp {
	return DirStamp{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Ctime: st.Ctim.Nano()}
}
