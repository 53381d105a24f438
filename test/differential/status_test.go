package differential

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runRaw runs bin once for cmd with stdin as given (no rendering).
func runRaw(t *testing.T, bin, cmd, stdin string) outcome {
	t.Helper()
	return execCNI(t, bin, []byte(stdin), op{cmd: cmd, containerID: "ctr-status", ifname: "eth0", why: "as given"})
}

// TestStatusOfConfigsNamingNoRange: STATUS on an ipam section that names no
// range, and on the commit marker's entry, answers as host-local's does
// (success). These are the configs a runtime that rebuilds each plugin's
// config from CNI's schema hands the plugins (Multus v4.3.0's STATUS through
// libcni: the bridge's ipam without ranges or dataDir, the marker with
// "ipam":{}). ADD and CHECK of the same IPAM configs still fail in both,
// hostlease's with code 7 naming the field. DEL is where they differ: Multus
// v4.3.0 DELs its cluster network with the same rebuilt config, host-local
// refuses it (the pod is never deleted), hostlease releases by attachment and
// succeeds (test/integration TestVerbDELNamingNoRange).
func TestStatusOfConfigsNamingNoRange(t *testing.T) {
	hostLocal, hostLease := filepath.Join(binDir, "host-local"), filepath.Join(binDir, "hostlease")
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, conf string
		ipamConf   bool // an IPAM config (ADD/CHECK/DEL refused), not the marker
	}{
		{"bridge's ipam as libcni rebuilds it", `{"cniVersion":"1.1.0","ipam":{"type":"hostlease"},"name":"hlk8s","type":"bridge"}`, true},
		{"marker as libcni rebuilds it", `{"cniVersion":"1.1.0","ipam":{},"name":"hlk8s","type":"hostlease"}`, false},
		{"marker as written", `{"cniVersion":"1.1.0","name":"hlk8s","type":"hostlease","dataDir":"` + t.TempDir() + `"}`, false},
		{"no range, an unusable dataDir", `{"cniVersion":"1.1.0","name":"hlk8s","type":"bridge","ipam":{"type":"hostlease","dataDir":"` + notADir + `/d"}}`, true},
		{"empty ranges, failStatusOnExhaustion", `{"cniVersion":"1.1.0","name":"hlk8s","type":"bridge","ipam":{"type":"hostlease","ranges":[],"failStatusOnExhaustion":true}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := runRaw(t, hostLocal, "STATUS", tc.conf), runRaw(t, hostLease, "STATUS", tc.conf)
			if !a.ok || !b.ok {
				t.Fatalf("STATUS: host-local ok=%v %s; hostlease ok=%v %s; want both to succeed", a.ok, a.raw, b.ok, b.raw)
			}
			if !tc.ipamConf {
				return
			}
			a, b = runRaw(t, hostLocal, "DEL", tc.conf), runRaw(t, hostLease, "DEL", tc.conf)
			if a.ok || !b.ok {
				t.Errorf("DEL: host-local ok=%v %s; hostlease ok=%v %s; want host-local to refuse it and hostlease to succeed", a.ok, a.raw, b.ok, b.raw)
			}
			for _, cmd := range []string{"ADD", "CHECK"} {
				a, b := runRaw(t, hostLocal, cmd, tc.conf), runRaw(t, hostLease, cmd, tc.conf)
				if a.ok || b.ok {
					t.Fatalf("%s: host-local ok=%v %s; hostlease ok=%v %s; want both to fail", cmd, a.ok, a.raw, b.ok, b.raw)
				}
				if b.code != 7 || b.msg != "ipam.ranges: "+a.msg {
					t.Errorf("%s: hostlease %v %q; want 7 %q (host-local's %q naming the field)", cmd, b.code, b.msg, "ipam.ranges: "+a.msg, a.msg)
				}
			}
		})
	}

	// A config that names a range keeps STATUS's own checks, which host-local
	// does not make: a data dir that cannot be created is code 50.
	conf := `{"cniVersion":"1.1.0","name":"hlk8s","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.9.0.0/24"}]],"dataDir":"` + notADir + `/d"}}`
	a, b := runRaw(t, hostLocal, "STATUS", conf), runRaw(t, hostLease, "STATUS", conf)
	if !a.ok {
		t.Errorf("host-local STATUS with ranges and an unusable dataDir: %s; want success (it checks nothing)", a.raw)
	}
	if b.ok || b.code != 50 || !strings.Contains(b.msg, "data dir") {
		t.Errorf("hostlease STATUS with ranges and an unusable dataDir: ok=%v %s; want code 50 naming the data dir", b.ok, b.raw)
	}
	// ... and an invalid range is refused at STATUS as at ADD.
	conf = `{"cniVersion":"1.1.0","name":"hlk8s","type":"bridge","ipam":{"type":"hostlease","ranges":[[{"subnet":"10.9.0.1/31"}]]}}`
	if b := runRaw(t, hostLease, "STATUS", conf); b.ok || b.code != 7 {
		t.Errorf("hostlease STATUS with an invalid range: ok=%v %s; want code 7", b.ok, b.raw)
	}
}
