package harness

import "testing"

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Version
		ok   bool
	}{
		{"v2.1.4", Version{2, 1, 4}, true},
		{"1.7.35", Version{1, 7, 35}, true},
		{" v2.4.2\n", Version{2, 4, 2}, true},
		{"v2.1", Version{}, false},
		{"v2.1.4-rc.1", Version{}, false},
		{"latest", Version{}, false},
		{"", Version{}, false},
	} {
		got, err := ParseVersion(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	if s := (Version{1, 7, 35}).String(); s != "v1.7.35" {
		t.Errorf("String() = %q", s)
	}
}

func TestAtLeast(t *testing.T) {
	v := Version{2, 2, 2}
	for _, c := range []struct {
		maj, min, patch int
		want            bool
	}{
		{2, 2, 2, true}, {2, 2, 1, true}, {2, 2, 3, false}, {2, 1, 9, true}, {2, 3, 0, false}, {1, 9, 9, true}, {3, 0, 0, false},
	} {
		if got := v.AtLeast(c.maj, c.min, c.patch); got != c.want {
			t.Errorf("%v.AtLeast(%d.%d.%d) = %v, want %v", v, c.maj, c.min, c.patch, got, c.want)
		}
	}
}

// The version list parses, has no duplicates, and its first entry is the
// default; CONTAINERD_VERSION selects another.
func TestVersions(t *testing.T) {
	vs := Versions()
	if len(vs) == 0 {
		t.Fatal("containerd-versions.txt lists no version")
	}
	seen := map[Version]bool{}
	for _, v := range vs {
		if seen[v] {
			t.Errorf("%v listed twice", v)
		}
		seen[v] = true
	}
	if DefaultVersion() != vs[0] {
		t.Errorf("DefaultVersion %v, want the first entry %v", DefaultVersion(), vs[0])
	}
	t.Setenv("CONTAINERD_VERSION", "v1.7.35")
	t.Setenv("HOSTLEASE_E2E_SUITE", "")
	if v, err := SelectedVersion(); err != nil || v != (Version{1, 7, 35}) {
		t.Errorf("SelectedVersion = %v, %v; want v1.7.35", v, err)
	}
	if !CoreOnly() && vs[0] != (Version{1, 7, 35}) {
		t.Errorf("CoreOnly() = false for a version other than the default")
	}
	t.Setenv("HOSTLEASE_E2E_SUITE", "full")
	if CoreOnly() {
		t.Errorf("CoreOnly() = true with HOSTLEASE_E2E_SUITE=full")
	}
}
