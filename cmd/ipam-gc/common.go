package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/daemon"
)

func versionString() string {
	return fmt.Sprintf("hostlease-gc %s (%s)", daemon.Version, runtime.Version())
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// age prints a duration the way kubectl does: 45s, 12m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// ageSeconds is d in whole seconds, never negative: the age JSON rows carry.
func ageSeconds(d time.Duration) int64 {
	return max(int64(d/time.Second), 0)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// checkDir verifies that the directory a flag names exists and is a directory:
// a mistyped path must not read as "no allocations" or receive new files.
func checkDir(flagName, dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: %s must not be empty", errUsage, flagName)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: no such directory", flagName, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flagName, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s: not a directory", flagName, dir)
	}
	return nil
}

// checkNetwork verifies a --network value is a name the plugin accepts: it
// names a file and a directory, so it must never be a path.
func checkNetwork(name string) error {
	if !allocator.ValidNetworkName(name) {
		return fmt.Errorf("%w: --network %q is not a network name (letters, digits, '_', '.', '-'; starting with a letter or digit)", errUsage, name)
	}
	return nil
}

// checkCRIEndpoint verifies --cri-endpoint names a unix socket (the only
// transport CRI runtimes serve and daemon.DialCRI speaks), before anything else
// is looked at.
func checkCRIEndpoint(endpoint string) error {
	switch {
	case endpoint == "":
		return fmt.Errorf("%w: --cri-endpoint must not be empty", errUsage)
	case strings.Contains(endpoint, "://") && !strings.HasPrefix(endpoint, "unix://"),
		endpoint == "unix://":
		return fmt.Errorf("%w: --cri-endpoint %q: only unix:// endpoints (or a socket path) are supported", errUsage, endpoint)
	}
	return nil
}
