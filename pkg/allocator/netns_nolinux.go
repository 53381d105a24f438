//go:build !linux

package allocator

import "errors"

// fileHandle: no file handles here (every DirID is Weak).
func fileHandle(string) FileHandle { return "" }

// ReadFileHandle: no file handles here.
func ReadFileHandle(path string) (FileHandle, error) {
	return "", errors.New(path + ": no file handles on this system")
}

// ReadNetnsHolders: network namespaces are Linux's.
func ReadNetnsHolders(string) (NetnsHolders, error) {
	return nil, errors.New("network namespaces are not read on this system")
}
