package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator"
)

// Config and STATUS: a conflist without an ipam section; STATUS fails only when
// no ADD can succeed.

// "ipam": null, or no ipam under a non-hostlease type, is host-local's
// "missing 'ipam' key", never the commit marker.
func TestHardeningMissingIPAM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	for name, conf := range map[string]string{
		"ipam null":                   `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"bridge","dataDir":"` + dir + `","ipam":null}`,
		"ipam null, type hostlease":   `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"hostlease","dataDir":"` + dir + `","ipam":null}`,
		"no ipam, bridge":             `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"bridge","dataDir":"` + dir + `"}`,
		"no ipam, host-local as type": `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"host-local","dataDir":"` + dir + `"}`,
	} {
		for _, cmd := range []string{"ADD", "DEL", "CHECK"} {
			o := runPlugin(ctx, call{Command: cmd, ContainerID: "a", IfName: "eth0", Netns: "/x"}, []byte(conf))
			if o.Err == nil || o.Err.Code != 7 || o.Err.Msg != "IPAM config missing 'ipam' key" {
				t.Errorf("%s %s: %v; want CNI 7 \"IPAM config missing 'ipam' key\"", name, cmd, o)
			}
		}
	}
	// The marker itself still works.
	marker := `{"cniVersion":"1.1.0","name":"hlh-noipam","type":"hostlease","dataDir":"` + dir + `"}`
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, []byte(marker)); !o.OK() {
		t.Errorf("commit marker ADD: %v", o)
	}
}

// STATUS fails only when no ADD can succeed: a full pool is fine by default
// (a STATUS error costs the node its pods) and 50 only with the opt-in; a
// data dir where no store can be created is 50.
func TestHardeningStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	status := func(conf []byte) outcome { return runPlugin(ctx, call{Command: "STATUS"}, conf) }
	tiny := ipamConf(t, "hlh-status", dir, "10.87.0.0/30") // one allocatable address
	if o := status(tiny); !o.OK() {
		t.Errorf("STATUS before the first ADD: %v", o)
	}
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, tiny); !o.OK() {
		t.Fatalf("ADD: %v", o)
	}
	if o := status(tiny); !o.OK() {
		t.Errorf("STATUS on a full pool, by default: %v; want success (exhaustion is an alert, not a node outage)", o)
	}
	optIn := bytes.Replace(tiny, []byte(`"type":"hostlease"`), []byte(`"failStatusOnExhaustion":true,"type":"hostlease"`), 1)
	if o := status(optIn); o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable {
		t.Errorf("STATUS on a full pool with failStatusOnExhaustion: %v; want 50", o)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the read-only data dir case is not run")
		return
	}
	fresh := t.TempDir()
	wrapper := []string{"unshare", "-m", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$1"`, fresh}
	o := wrapped(ctx, wrapper, call{Command: "STATUS"}, ipamConf(t, "hlh-status", filepath.Join(fresh, "sub"), "10.87.0.0/24"))
	if o.Err == nil || o.Err.Code != allocator.ErrStatusUnavailable || !strings.Contains(o.Err.Msg, fresh) {
		t.Errorf("STATUS with a data dir that cannot be created: %v; want 50 naming %s", o, fresh)
	}
}

// A key of the ipam section nothing reads (a typo) is accepted, as
// host-local accepts it, with one warning line per key on stderr, on every
// verb; the fast reader and the general decoder (a config with an escaped
// string) warn alike. A rangeStart after its rangeEnd is refused with code 7
// naming both fields, not as "not in network".
func TestHardeningUnknownIPAMKeysWarned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	for _, name := range []string{`hlh-typo`, `hlh-typ\u006f`} {
		conf := []byte(`{"cniVersion":"1.1.0","name":"` + name + `","type":"bridge","ipam":{"type":"hostlease","dataDir":"` + dir +
			`","rangeStrat":"10.86.0.9","ranges":[[{"subnet":"10.86.0.0/24","gatway":"10.86.0.1"}]]}}`)
		for _, cmd := range []string{"ADD", "CHECK", "DEL"} {
			o := runPlugin(ctx, call{Command: cmd, ContainerID: "a", IfName: "eth0", Netns: "/x"}, conf)
			if !o.OK() {
				t.Fatalf("%s %s with unknown ipam keys: %v; want it accepted", name, cmd, o)
			}
			lines := strings.Split(strings.TrimSpace(string(o.Stderr)), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "key=ipam.rangeStrat") ||
				!strings.Contains(lines[1], "key=ipam.ranges[0][0].gatway") {
				t.Errorf("%s %s: stderr %q; want one warning per unknown key", name, cmd, o.Stderr)
			}
		}
	}
	clean := ipamConf(t, "hlh-clean", dir, "10.85.0.0/24")
	if o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, clean); !o.OK() || len(o.Stderr) != 0 {
		t.Errorf("ADD of a config without unknown keys: %v, stderr %q; want nothing on stderr", o, o.Stderr)
	}
	unordered := []byte(`{"cniVersion":"1.1.0","name":"hlh-order","type":"bridge","ipam":{"type":"hostlease","dataDir":"` + dir +
		`","ranges":[[{"subnet":"10.84.0.0/24","rangeStart":"10.84.0.50","rangeEnd":"10.84.0.20"}]]}}`)
	o := runPlugin(ctx, call{Command: "ADD", ContainerID: "a", IfName: "eth0", Netns: "/x"}, unordered)
	if o.Err == nil || o.Err.Code != 7 || !strings.Contains(o.Err.Msg, "rangeStart 10.84.0.50 is after rangeEnd 10.84.0.20") {
		t.Errorf("ADD with rangeStart after rangeEnd: %v; want code 7 naming both fields", o)
	}
}
