package faultinject

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	gcdaemon "github.com/hostlease/hostlease/pkg/daemon"
)

// TestAuditKeyDamage: a damaged key in the audit log or its queue (a key of
// another length, a sequence no log reaches) or a damaged sequence in the
// audit bucket's header must never make appends overwrite one another: after
// the damage, N releases by real DELs give N release entries that
// `hostlease-gc audit` shows, and the damaged entry is shown as such.
func TestAuditKeyDamage(t *testing.T) {
	last := func(b *bolt.Bucket) ([]byte, []byte) {
		k, v := b.Cursor().Last()
		return bytes.Clone(k), bytes.Clone(v)
	}
	// first: the release entries of the sandbox released before the damage
	// (the damaged key's entry is a copy of its entry: a queue's flush moves
	// it to the log under a sequence of its own, so it counts twice);
	// shown: the damaged key stays in the log, shown as a damaged entry.
	cases := []struct {
		name   string
		first  int
		shown  bool
		damage func(tx *bolt.Tx) error
	}{
		{"queue key of 9 bytes", 2, false, func(tx *bolt.Tx) error {
			q := tx.Bucket([]byte(bucketAuditQueue))
			k, v := last(q)
			return q.Put(append(k, 0), v)
		}},
		{"queue key 2^64-1", 2, false, func(tx *bolt.Tx) error {
			q := tx.Bucket([]byte(bucketAuditQueue))
			_, v := last(q)
			return q.Put(binary.BigEndian.AppendUint64(nil, math.MaxUint64), v)
		}},
		{"audit key 2^64-1", 1, true, func(tx *bolt.Tx) error {
			_, v := last(tx.Bucket([]byte(bucketAuditQueue)))
			return tx.Bucket([]byte(bucketAudit)).Put(binary.BigEndian.AppendUint64(nil, math.MaxUint64), v)
		}},
		{"audit bucket sequence 2^64-1", 1, false, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(bucketAudit)).SetSequence(math.MaxUint64)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, netnsDir := t.TempDir(), t.TempDir()
			conf := netConf(dir)
			const n = 14 // more than the queue holds inline: a flush happens among them
			var ids []string
			for i := range n + 1 {
				id := fmt.Sprintf("%012x%052x", 0xa0d1700+i, 0)
				ids = append(ids, id)
				ns := filepath.Join(netnsDir, id[:12])
				if err := os.WriteFile(ns, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if out := runPlugin(invocation{Command: "ADD", ContainerID: id, Netns: ns, Conf: conf}); !out.OK() {
					t.Fatalf("ADD %d: %v", i, out)
				}
			}
			// One release before the damage: the queue exists and has an entry.
			if out := runPlugin(invocation{Command: "DEL", ContainerID: ids[0], Netns: filepath.Join(netnsDir, ids[0][:12]), Conf: conf}); !out.OK() {
				t.Fatalf("DEL: %v", out)
			}
			db, err := bolt.Open(filepath.Join(dir, network+".db"), 0o600, &bolt.Options{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tc.damage); err != nil {
				db.Close()
				t.Fatalf("damage: %v", err)
			}
			db.Close()
			for _, id := range ids[1:] {
				if out := runPlugin(invocation{Command: "DEL", ContainerID: id, Netns: filepath.Join(netnsDir, id[:12]), Conf: conf}); !out.OK() {
					t.Errorf("DEL %s after the damage: %v", id[:12], out)
				}
			}
			res := runCLI(t, "audit", "--network", network, "--data-dir", dir, "--limit", "1000", "-o", "json")
			if res.Code != 0 {
				t.Fatalf("audit: %s", res)
			}
			var rows []gcdaemon.AuditRow
			if err := json.Unmarshal([]byte(res.Stdout), &rows); err != nil {
				t.Fatalf("audit output: %v\n%s", err, res)
			}
			released := map[string]int{}
			damaged := 0
			for _, r := range rows {
				switch r.Action {
				case "release":
					released[r.ContainerID]++
				case "damaged-entry":
					damaged++
				}
			}
			missing := 0
			for i, id := range ids {
				want := 1
				if i == 0 {
					want = tc.first
				}
				if released[id] != want {
					missing++
					t.Errorf("release of %s: %d audit entries, want %d", id[:12], released[id], want)
				}
			}
			if tc.shown && damaged == 0 {
				missing++
				t.Errorf("the entry under the damaged key is not shown as damaged")
			}
			if missing > 0 {
				t.Logf("audit log:\n%s", runCLI(t, "audit", "--network", network, "--data-dir", dir, "--limit", "1000"))
			}
		})
	}
}
