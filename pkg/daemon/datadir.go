package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// DataDirStatus is what a sweep found at --data-dir. A missing data dir (a
// mistyped --data-dir, or not the ipam dataDir) sweeps nothing, forever and
// silently, unless it is said: the daemon logs it when it changes, exports
// it (hostlease_data_dir_ok) and /readyz gives its Why.
type DataDirStatus struct {
	// OK: the directory exists and holds at least one store.
	OK bool
	// Missing: the directory does not exist, is not one, or cannot be
	// listed (logged as a warning). Without Missing, a not-OK directory is
	// empty: normal on a node before the plugin's first ADD.
	Missing bool
	// Unusable: Missing for a reason a first ADD cannot mend (not a
	// directory, unreadable, unlistable); /readyz fails. A directory that
	// does not exist yet is what a node shows before the plugin's first ADD
	// creates it (or a mistyped path): ready, and /readyz says which.
	Unusable bool
	// Why says, when not OK, what was found and what it means.
	Why string
}

// dataDirStatus judges dir from a stat of it, the number of stores found in
// it and the error listing it returned.
func dataDirStatus(dir string, stores int, listErr error) DataDirStatus {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return DataDirStatus{Missing: true, Why: fmt.Sprintf("--data-dir %s does not exist: no store is swept until the plugin creates it at its first ADD (if pods already use hostlease on this node: a mistyped path, or not the ipam dataDir?)", dir)}
	case err != nil:
		return DataDirStatus{Missing: true, Unusable: true, Why: fmt.Sprintf("--data-dir %s cannot be read: %v", dir, err)}
	case !fi.IsDir():
		return DataDirStatus{Missing: true, Unusable: true, Why: fmt.Sprintf("--data-dir %s is not a directory: no store is swept", dir)}
	case listErr != nil:
		return DataDirStatus{Missing: true, Unusable: true, Why: fmt.Sprintf("--data-dir %s cannot be listed: %v", dir, listErr)}
	case stores == 0:
		return DataDirStatus{Why: fmt.Sprintf("--data-dir %s holds no store yet: nothing to sweep until the plugin's first ADD with this dataDir (if pods already use hostlease on this node, their ipam dataDir differs)", dir)}
	}
	return DataDirStatus{OK: true}
}
