package integration

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// A call that cannot have the store lock within ipam.lockTimeout fails with
// CNI error 11 (try again later), returning while another process still
// holds the lock, and changes nothing; once the lock is free the same ADD
// succeeds. The plugin waits for the lock in the kernel on a goroutine, with
// a timer for the timeout, while running on one P (internal/oneproc): the
// timer must still fire while the only P's goroutine is blocked in flock(2).
func TestLockTimeoutTriesAgainLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	dir := t.TempDir()
	var conf map[string]any
	if err := json.Unmarshal(ipamConf(t, "locked", dir, "10.77.0.0/24"), &conf); err != nil {
		t.Fatal(err)
	}
	conf["ipam"].(map[string]any)["lockTimeout"] = "300ms"
	confBytes, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	add := func(id string) outcome {
		return runPlugin(ctx, call{Command: "ADD", ContainerID: id, IfName: "eth0", Netns: "/x"}, confBytes)
	}
	if o := add("first"); !o.OK() {
		t.Fatalf("first ADD: %v", o)
	}
	path := store.FilePath(dir, "locked")
	before := readStore(t, path)

	// Another writer holds the store's lock for the whole call.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	o := add("second")
	if o.Err == nil || o.Err.Code != 11 || !strings.Contains(o.Err.Msg, "timed out waiting for the store lock") {
		t.Fatalf("ADD while the store lock is held: %v; want CNI error 11 naming the lock timeout", o)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if after := readStore(t, path); len(after.Records) != len(before.Records) {
		t.Fatalf("the timed-out ADD changed the store: %d records, had %d", len(after.Records), len(before.Records))
	}

	// The runtime's retry, once the lock is free.
	o = add("second")
	if !o.OK() {
		t.Fatalf("ADD once the lock is free: %v", o)
	}
	if got := len(readStore(t, path).Records); got != len(before.Records)+1 {
		t.Fatalf("%d records after the retried ADD, want %d", got, len(before.Records)+1)
	}
}
