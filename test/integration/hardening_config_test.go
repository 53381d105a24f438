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
