package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// A store of another schema (here schema 1, JSON values) is refused by ADD,
// CHECK and STATUS with a CNI error naming the schema found and the one
// expected; DEL exits 0 (it can release nothing from it, and a failing DEL is
// retried forever); no verb changes the file.
func TestVerbsOnAStoreOfAnotherSchema(t *testing.T) {
	dir := t.TempDir()
	conf := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"hostlease",
		"ipam":{"type":"hostlease","dataDir":%q,"ranges":[[{"subnet":"10.9.0.0/24"}]]}}`, dir))
	args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/x", StdinData: conf}
	// A store made by this binary, then given schema 1.
	if err := discardStdout(func() error { return cmdAdd(args) }); err != nil {
		t.Fatal(err)
	}
	path := store.FilePath(dir, "net1")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(btx *bolt.Tx) error { return btx.Bucket([]byte("meta")).Put([]byte("schema"), []byte{1}) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(path)

	want := func(verb string, err error, code uint) {
		t.Helper()
		var cerr *types.Error
		if !errors.As(err, &cerr) || cerr.Code != code {
			t.Fatalf("%s: %v, want CNI error %d", verb, err, code)
		}
		msg := cerr.Msg
		if !strings.Contains(msg, "has schema 1") || !strings.Contains(msg, fmt.Sprintf("reads schema %d only", store.SchemaVersion)) {
			t.Errorf("%s: message %q does not name the schema found and the one expected", verb, msg)
		}
	}
	want("ADD", discardStdout(func() error { return cmdAdd(args) }), types.ErrIOFailure)
	want("STATUS", cmdStatus(args), allocator.ErrStatusUnavailable)
	if err := cmdDel(args); err != nil {
		t.Errorf("DEL on a store of another schema: %v, want exit 0", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("a verb changed a store of another schema")
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("data dir holds %d entries, want the store alone (nothing set aside or created)", len(entries))
	}
}

// discardStdout runs fn with stdout sent to /dev/null (ADD prints its result).
func discardStdout(fn func() error) error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	old := os.Stdout
	os.Stdout = null
	defer func() { os.Stdout = old }()
	return fn()
}
