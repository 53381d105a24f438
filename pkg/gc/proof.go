package gc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// BootClock tells when the node last booted. The production one reads the
// kernel's btime; tests give their own.
type BootClock interface {
	BootTime() (time.Time, error)
}

// ProcBootClock reads btime from <Dir>/stat (Dir is /proc on a node). btime is
// the wall-clock time of the boot as the kernel computes it now, so a clock
// stepped since the boot moves it too.
type ProcBootClock struct{ Dir string }

// BootTime reads and parses <Dir>/stat.
func (c ProcBootClock) BootTime() (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	return ParseBtime(b)
}

// ParseBtime finds the "btime <unix seconds>" line of a /proc/stat.
func ParseBtime(stat []byte) (time.Time, error) {
	sc := bufio.NewScanner(bytes.NewReader(stat))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "btime ")
		if !ok {
			continue
		}
		secs, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		if err != nil || secs <= 0 {
			return time.Time{}, fmt.Errorf("btime %q: not a positive unix time", rest)
		}
		return time.Unix(secs, 0).UTC(), nil
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, errors.New("no btime line")
}

// NetnsFacts is what the daemon saw of --netns-dir at the start of a sweep.
type NetnsFacts struct {
	// Visible: the directory exists and could be read.
	Visible bool
	// Entries is how many entries it holds.
	Entries int
	// LiveMissing counts records of READY sandboxes whose netns path is under
	// the directory and missing: a live sandbox's netns cannot be gone, so
	// the directory is not the runtime's (a wrong mount).
	LiveMissing int
}

// NetnsDirTrusted decides whether a missing netns under the directory proves
// a sandbox dead. An empty directory proves nothing: it is what an unmounted
// or wrongly mounted host directory looks like, and trusting it would make
// every record look dead at once (a node with no pod left falls back to the
// rules without proof; a rebooted one has the boot time as proof).
func NetnsDirTrusted(f NetnsFacts) bool {
	return f.Visible && f.Entries > 0 && f.LiveMissing == 0
}

// netnsUnder reports whether path lies under dir (both cleaned), so only a
// path in the watched directory is judged.
func netnsUnder(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	return strings.HasPrefix(filepath.Clean(path), filepath.Clean(dir)+"/")
}
