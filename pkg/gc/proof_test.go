package gc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseBtime(t *testing.T) {
	cases := []struct {
		name  string
		stat  string
		want  time.Time
		fails bool
	}{
		{"a real /proc/stat", "cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5 6\nctxt 99\nbtime 1763900000\nprocesses 12\n", time.Unix(1763900000, 0).UTC(), false},
		{"btime on the last line without newline", "cpu 1\nbtime 1700000000", time.Unix(1700000000, 0).UTC(), false},
		{"no btime line", "cpu 1\nctxt 2\n", time.Time{}, true},
		{"btime not a number", "btime soon\n", time.Time{}, true},
		{"btime zero", "btime 0\n", time.Time{}, true},
		{"btime negative", "btime -5\n", time.Time{}, true},
		{"a field that only starts with btime", "btimex 1700000000\n", time.Time{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseBtime([]byte(tc.stat))
			if (err != nil) != tc.fails || !got.Equal(tc.want) {
				t.Fatalf("ParseBtime = %v, %v; want %v (error %v)", got, err, tc.want, tc.fails)
			}
		})
	}
	// The real one, when there is one: a boot in the past.
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		bt, err := ParseBtime(b)
		if err != nil || bt.After(time.Now()) {
			t.Fatalf("this machine's /proc/stat: %v %v", bt, err)
		}
	}
}

func TestProcBootClock(t *testing.T) {
	dir := t.TempDir()
	if _, err := (ProcBootClock{Dir: dir}).BootTime(); err == nil {
		t.Fatal("no stat file: want an error")
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte("cpu 1\nbtime 1700000123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ProcBootClock{Dir: dir}.BootTime()
	if err != nil || got.Unix() != 1700000123 {
		t.Fatalf("BootTime = %v, %v", got, err)
	}
}

func TestPredatesBoot(t *testing.T) {
	boot := t0
	cases := []struct {
		name               string
		created, boot, now time.Time
		want               bool
	}{
		{"written before the boot", boot.Add(-time.Hour), boot, boot.Add(time.Hour), true},
		{"written a second before the boot", boot.Add(-time.Second), boot, boot.Add(time.Hour), true},
		{"written at the boot", boot, boot, boot.Add(time.Hour), false},
		{"written after the boot", boot.Add(time.Minute), boot, boot.Add(time.Hour), false},
		{"unknown boot time", boot.Add(-time.Hour), time.Time{}, boot, false},
		{"a boot time in the future cannot be right", boot.Add(-time.Hour), boot, boot.Add(-time.Minute), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PredatesBoot(tc.created, tc.boot, tc.now); got != tc.want {
				t.Fatalf("PredatesBoot = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNetnsDirTrusted(t *testing.T) {
	cases := []struct {
		name  string
		facts NetnsFacts
		want  bool
	}{
		{"visible with entries, every live netns present", NetnsFacts{Visible: true, Entries: 1}, true},
		{"not visible (no mount)", NetnsFacts{}, false},
		{"visible but empty: an unmounted dir looks like this", NetnsFacts{Visible: true}, false},
		{"a READY sandbox's netns is missing: not the runtime's dir", NetnsFacts{Visible: true, Entries: 3, LiveMissing: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NetnsDirTrusted(tc.facts); got != tc.want {
				t.Fatalf("NetnsDirTrusted(%+v) = %v, want %v", tc.facts, got, tc.want)
			}
		})
	}
}

func TestNetnsUnder(t *testing.T) {
	cases := []struct {
		path, dir string
		want      bool
	}{
		{"/var/run/netns/cni-1", "/var/run/netns", true},
		{"/var/run/netns/cni-1", "/var/run/netns/", true},
		{"/var/run/netns", "/var/run/netns", false},
		{"/var/run/netns/../other/cni-1", "/var/run/netns", false},
		{"/var/run/netnsX/cni-1", "/var/run/netns", false},
		{"/proc/123/ns/net", "/var/run/netns", false},
		{"", "/var/run/netns", false},
		{"/var/run/netns/cni-1", "", false},
	}
	for _, tc := range cases {
		if got := netnsUnder(tc.path, tc.dir); got != tc.want {
			t.Errorf("netnsUnder(%q, %q) = %v, want %v", tc.path, tc.dir, got, tc.want)
		}
	}
}

func TestGuardLimit(t *testing.T) {
	cases := []struct {
		fraction float64
		held     int
		want     int
	}{
		{0.5, 100, 50},
		{0.5, 3, 1},
		{0.5, 2, 1},
		{0.5, 1, 1},
		{0.5, 0, 1},
		{0.01, 10, 1},
		{1, 7, 7},
		{0.57, 100, 57},
		{0.29, 100, 29},
		{0, 100, 0},
	}
	for _, tc := range cases {
		if got := GuardLimit(tc.fraction, tc.held); got != tc.want {
			t.Errorf("GuardLimit(%g, %d) = %d, want %d", tc.fraction, tc.held, got, tc.want)
		}
	}
}
