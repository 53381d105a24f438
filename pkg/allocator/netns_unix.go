//go:build unix

package allocator

import (
	"os"
	"syscall"
)

func dirIDOfInfo(fi os.FileInfo) (DirID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return DirID{}, false
	}
	return DirID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true
}

func nsIDOfInfo(fi os.FileInfo) NsID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return NsID{}
	}
	return NsID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}
