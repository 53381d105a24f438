package harness

import (
	_ "embed"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// versionsFile is e2e/harness/containerd-versions.txt: the versions the suite
// runs on, default first. hack/e2e-setup.sh and the Makefile read it too.
//
//go:embed containerd-versions.txt
var versionsFile string

// Version is a containerd release, e.g. v2.1.4.
type Version struct {
	Major, Minor, Patch int
}

// ParseVersion parses "v2.1.4" (the leading v is optional).
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("containerd version %q: want vMAJOR.MINOR.PATCH", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("containerd version %q: want vMAJOR.MINOR.PATCH", s)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= major.minor.patch.
func (v Version) AtLeast(major, minor, patch int) bool {
	if v.Major != major {
		return v.Major > major
	}
	if v.Minor != minor {
		return v.Minor > minor
	}
	return v.Patch >= patch
}

// Versions returns the versions of containerd-versions.txt, default first.
func Versions() []Version {
	var out []Version
	for _, line := range strings.Split(versionsFile, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := ParseVersion(line)
		if err != nil {
			panic("containerd-versions.txt: " + err.Error())
		}
		out = append(out, v)
	}
	return out
}

// DefaultVersion is the first version of containerd-versions.txt.
func DefaultVersion() Version { return Versions()[0] }

// SelectedVersion is the containerd version this test process runs on:
// $CONTAINERD_VERSION, or DefaultVersion when it is not set.
func SelectedVersion() (Version, error) {
	if s := os.Getenv("CONTAINERD_VERSION"); s != "" {
		return ParseVersion(s)
	}
	return DefaultVersion(), nil
}

// CoreOnly reports whether this process runs only the core scenarios:
// $HOSTLEASE_E2E_SUITE=core, or, when that is not set, a version other than
// the default (the Makefile runs the whole suite on the default version and
// the core scenarios on the others).
func CoreOnly() bool {
	switch os.Getenv("HOSTLEASE_E2E_SUITE") {
	case "core":
		return true
	case "full":
		return false
	}
	v, err := SelectedVersion()
	return err == nil && v != DefaultVersion()
}
