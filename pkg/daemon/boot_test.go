package daemon

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
