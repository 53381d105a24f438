//go:build !unix

package allocator

import "os"

func dirIDOfInfo(os.FileInfo) (DirID, bool) { return DirID{}, false }

func nsIDOfInfo(os.FileInfo) NsID { return NsID{} }
