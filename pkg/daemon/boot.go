package daemon

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
