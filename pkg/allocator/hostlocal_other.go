//go:build !unix

package allocator

import "errors"

// Without a ctime to read every call merges (the stamp never matches).
func statDir(string) (DirStamp, error) {
	return DirStamp{}, errors.New("no directory stamp on this platform")
}

func fdStamp(int) DirStamp { return DirStamp{} }
