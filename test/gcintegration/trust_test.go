package gcintegration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// A store another user owns and can write (uid 65534, mode 0666: made by
// that user, then moved into the data dir) is refused by the daemon as an
// environment error of that network: counted (errno EPERM) and logged with
// the fix, never read, swept, set aside or rebuilt, while the other
// networks are swept as usual.
func TestForeignStoreRefusedNeverRebuilt(t *testing.T) {
	t.Parallel()
	n := newNode(t, 4)
	n.add("leak")
	// A store of network "foreign" whose one record's sandbox the runtime
	// does not list: a sweep that used it would reclaim it.
	foreignConf := bytes.Replace(n.conf, []byte(`"name":"`+network+`"`), []byte(`"name":"foreign"`), 1)
	if o := n.plugin("ADD", "ghost", foreignConf); !o.OK() {
		t.Fatalf("ADD into foreign: %s", o)
	}
	path := store.FilePath(n.dataDir, "foreign")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	scratch := testbin.StickyDir(t)
	planted := filepath.Join(scratch, "foreign.db")
	testbin.AsNobody(t, "cp", path, planted)
	testbin.AsNobody(t, "chmod", "0666", planted)
	if err := os.Rename(planted, path); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	d := n.startDaemon()
	eventually(t, "the refused store counted on 2 sweeps", func() (bool, string) {
		v, _ := d.scrape().get("hostlease_store_errors_total", lbl("network", "foreign", "class", "environment", "errno", "EPERM"))
		return v >= 2, fmt.Sprintf("store_errors{foreign,environment,EPERM} %v", v)
	})
	eventually(t, "the healthy network's leak reclaimed", func() (bool, string) {
		v := reclaimsOf(d.scrape(), "sandbox_absent")
		return v == 1, fmt.Sprintf("reclaims %v", v)
	})
	found := false
	for _, e := range d.logs.entries("store skipped this sweep: environment error (not damage; the store is left as it is)") {
		msg, _ := e["error"].(string)
		found = found || strings.Contains(msg, "owned by uid 65534") && strings.Contains(msg, "mode 0666") && strings.Contains(msg, "chown 0 "+path)
	}
	if !found {
		t.Errorf("no log line names the refused store's owner, mode and fix")
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("the refused store was written")
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Errorf("a refused store was set aside: %v", aside)
	}
	if v, _ := d.scrape().get("hostlease_stores_rebuilt_total", lbl("network", "foreign")); v != 0 {
		t.Errorf("stores_rebuilt{foreign} = %v", v)
	}
}
