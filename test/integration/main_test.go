// Package integration holds process-level integration tests of the hostlease
// CNI IPAM plugin: the real binary is exec'd (directly, or by libcni through the
// reference bridge plugin) exactly as a container runtime would, and the store
// it leaves behind is inspected with pkg/allocator and raw bbolt.
//
// TestMain builds hostlease, bridge and loopback (github.com/containernetworking/plugins,
// as pinned in go.mod) and a chained test plugin that fails on demand into one
// temporary CNI bin dir shared by every test.
package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hostlease/hostlease/internal/testing/cniexec"
	"github.com/hostlease/hostlease/internal/testing/testbin"
	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/allocator/store"
)

// binDir is the CNI bin dir holding every plugin the tests exec.
var binDir string

// hostleaseBin is the plugin under test.
func hostleaseBin() string { return filepath.Join(binDir, "hostlease") }

// TestMain builds the plugin binaries; the chained failing plugin is the e2e
// suite's (e2e/failplugin), host-local the reference the hardening tests
// tear containers down with.
func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, "integration", map[string]string{
		"hostlease": testbin.Plugin, "bridge": testbin.Bridge, "loopback": testbin.Loopback,
		"failplugin": testbin.FailPlugin, "host-local": testbin.HostLocal,
	}, &binDir))
}

// call is one plugin invocation's environment.
type call struct {
	Command     string // ADD, DEL, CHECK, GC, STATUS
	ContainerID string
	IfName      string
	Netns       string
	Args        string // CNI_ARGS
}

func (c call) env() []string {
	return []string{
		"CNI_COMMAND=" + c.Command,
		"CNI_CONTAINERID=" + c.ContainerID,
		"CNI_NETNS=" + c.Netns,
		"CNI_IFNAME=" + c.IfName,
		"CNI_ARGS=" + c.Args,
		"CNI_PATH=" + binDir,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	}
}

// outcome is what one plugin process did.
type outcome = cniexec.Outcome

// pluginCmd prepares the hostlease process for c with conf on stdin.
func pluginCmd(ctx context.Context, c call, conf []byte) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, hostleaseBin())
	cmd.Env = c.env()
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// runPlugin runs hostlease once to completion.
func runPlugin(ctx context.Context, c call, conf []byte) outcome {
	cmd, stdout, stderr := pluginCmd(ctx, c, conf)
	start := time.Now()
	err := cmd.Run()
	return cniexec.Classify(err, stdout.Bytes(), stderr.Bytes(), time.Since(start))
}

// resultIPs decodes the addresses of a CNI result.
func resultIPs(stdout []byte) ([]netip.Prefix, error) { return cniexec.ResultIPs(stdout) }

// ipamConf is the config a bridge plugin hands its IPAM plugin (its own
// stdin): top-level bridge keys plus the hostlease ipam section.
func ipamConf(t testing.TB, network, dataDir string, rangeSets ...string) []byte {
	t.Helper()
	sets := make([]any, len(rangeSets))
	for i, s := range rangeSets {
		sets[i] = []map[string]string{{"subnet": s}}
	}
	b, err := json.Marshal(map[string]any{
		"cniVersion": "1.1.0",
		"name":       network,
		"type":       "bridge",
		"bridge":     "unused0",
		"ipam": map[string]any{
			"type":    "hostlease",
			"dataDir": dataDir,
			"ranges":  sets,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// podArgs is CNI_ARGS as containerd passes them for a pod sandbox.
func podArgs(ns, name, uid, sandbox string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", ns, name, sandbox, uid)
}

// ownerEntry is one key of the owners index (bucket ownerhash): an 8-byte
// big-endian FNV-1a hash of containerID \0 ifname, then the address key.
type ownerEntry struct {
	Hash uint64
	IP   netip.Addr
}

// ownerHash is the store's owner hash, written out independently of the
// allocator package: the index format is what is checked.
func ownerHash(containerID, ifname string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(containerID + "\x00" + ifname))
	return h.Sum64()
}

// snapshot is everything a test asserts about a store, read without a writer.
type snapshot struct {
	Records []*allocator.Record
	// Owners is the raw owners index, read with bbolt directly: ByOwner
	// hides an index entry whose record is gone, this does not.
	Owners []ownerEntry
	// Taken is the raw taken bitmap the address choice reads, as addresses.
	Taken []netip.Addr
	// BadOwnerKeys are owners keys that do not parse.
	BadOwnerKeys [][]byte
	Count        int
	Audit        []allocator.AuditEvent
	// PageErrors are bbolt's own consistency check findings (tx.Check).
	PageErrors []error
	Size       int64
}

// readStore opens the store read-only through pkg/allocator (which must
// succeed and decode every record), then with raw bbolt for the owners index
// and a page-level consistency check.
func readStore(t testing.TB, path string) snapshot {
	t.Helper()
	var snap snapshot
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("store %s: %v", path, err)
	}
	snap.Size = fi.Size()
	s, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("store.Open(%s, read-only): %v", path, err)
	}
	err = s.View(func(tx *store.Tx) error {
		snap.Count = tx.Count()
		if err := tx.ForEach(func(r *allocator.Record) error {
			snap.Records = append(snap.Records, r)
			return nil
		}); err != nil {
			return fmt.Errorf("ForEach: %w", err)
		}
		snap.Audit, err = tx.AuditLog(1 << 30)
		return err
	})
	if cerr := s.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("reading store %s: %v", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("bbolt.Open(%s): %v", path, err)
	}
	defer db.Close()
	err = db.View(func(btx *bolt.Tx) error {
		for cerr := range btx.Check() {
			snap.PageErrors = append(snap.PageErrors, cerr)
		}
		// The taken index: per block of 4096 addresses (key: the block's
		// first address as family byte + address bytes), a bitmap.
		taken := btx.Bucket([]byte("takenbits"))
		if taken == nil {
			return errors.New("no takenbits bucket")
		}
		if err := taken.ForEach(func(k, v []byte) error {
			base, ok := parseAddrKey(k)
			if !ok || len(v) != 512 || base.As16()[15] != 0 || base.As16()[14]&0x0f != 0 {
				snap.BadOwnerKeys = append(snap.BadOwnerKeys, append([]byte("takenbits:"), k...))
				return nil
			}
			for i := range 4096 {
				if v[i/8]&(1<<(i%8)) == 0 {
					continue
				}
				ip := base
				for range i {
					ip = ip.Next()
				}
				snap.Taken = append(snap.Taken, ip)
			}
			return nil
		}); err != nil {
			return err
		}
		b := btx.Bucket([]byte("ownerhash"))
		if b == nil {
			return errors.New("no ownerhash bucket")
		}
		return b.ForEach(func(k, _ []byte) error {
			e, ok := parseOwnerKey(k)
			if !ok {
				snap.BadOwnerKeys = append(snap.BadOwnerKeys, append([]byte(nil), k...))
				return nil
			}
			snap.Owners = append(snap.Owners, e)
			return nil
		})
	})
	if err != nil {
		t.Fatalf("reading owners index of %s: %v", path, err)
	}
	return snap
}

func parseOwnerKey(k []byte) (ownerEntry, bool) {
	if len(k) < 8 {
		return ownerEntry{}, false
	}
	ip, ok := parseAddrKey(k[8:])
	if !ok {
		return ownerEntry{}, false
	}
	return ownerEntry{binary.BigEndian.Uint64(k), ip}, true
}

// parseAddrKey decodes the store's address key: a family byte, then the address.
func parseAddrKey(key []byte) (netip.Addr, bool) {
	switch {
	case len(key) == 5 && key[0] == 4:
		return netip.AddrFrom4([4]byte(key[1:])), true
	case len(key) == 17 && key[0] == 6:
		return netip.AddrFrom16([16]byte(key[1:])), true
	}
	return netip.Addr{}, false
}

// checkIntegrity asserts the store-level invariants: bbolt's page check is
// clean, the owners index and the allocs agree both ways (every index entry
// names a record of that owner at that address, every record has its entry),
// and no address has two owners.
func checkIntegrity(t testing.TB, snap snapshot) {
	t.Helper()
	for _, e := range snap.PageErrors {
		t.Errorf("bbolt consistency check: %v", e)
	}
	for _, k := range snap.BadOwnerKeys {
		t.Errorf("owners index: undecodable key %q", k)
	}
	if snap.Count != len(snap.Records) {
		t.Errorf("allocs: Count() = %d but ForEach saw %d records", snap.Count, len(snap.Records))
	}
	byIP := map[netip.Addr]*allocator.Record{}
	for _, r := range snap.Records {
		byIP[r.IP] = r
	}
	// The taken index and allocs hold the same addresses: an address in
	// allocs but not taken would be handed out twice; the reverse leaks it.
	inTaken := map[netip.Addr]bool{}
	for _, ip := range snap.Taken {
		inTaken[ip] = true
		if byIP[ip] == nil {
			t.Errorf("taken index: %s is marked taken but no record holds it", ip)
		}
	}
	for ip := range byIP {
		if !inTaken[ip] {
			t.Errorf("taken index: record %s is missing from the index (it could be handed out twice)", ip)
		}
	}
	indexed := map[ownerEntry]bool{}
	ownersOf := map[netip.Addr][]string{}
	for _, e := range snap.Owners {
		indexed[e] = true
		ownersOf[e.IP] = append(ownersOf[e.IP], fmt.Sprintf("%016x", e.Hash))
		r := byIP[e.IP]
		switch {
		case r == nil:
			t.Errorf("owners index: %016x -> %s, but no record holds %s", e.Hash, e.IP, e.IP)
		case ownerHash(r.ContainerID, r.IfName) != e.Hash:
			t.Errorf("owners index: %016x -> %s, but the record of %s is owned by %s/%s", e.Hash, e.IP, e.IP, r.ContainerID, r.IfName)
		}
	}
	for ip, owners := range ownersOf {
		if len(owners) > 1 {
			t.Errorf("address %s is indexed for %d owners: %v", ip, len(owners), owners)
		}
	}
	for _, r := range snap.Records {
		if !indexed[ownerEntry{ownerHash(r.ContainerID, r.IfName), r.IP}] {
			t.Errorf("record %s (owner %s/%s) has no owners index entry", r.IP, r.ContainerID, r.IfName)
		}
	}
}

// byOwner returns the records of (containerID, ifname) through the public
// index lookup, as ADD/DEL/CHECK see them.
func byOwner(t testing.TB, path string, ids []string, ifname string) map[string][]*allocator.Record {
	t.Helper()
	s, err := store.Open(path, store.OpenOptions{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("store.Open(%s): %v", path, err)
	}
	defer s.Close()
	out := map[string][]*allocator.Record{}
	err = s.View(func(tx *store.Tx) error {
		for _, id := range ids {
			recs, err := tx.Records(allocator.Query{Attachment: &allocator.Attachment{ContainerID: id, IfName: ifname}})
			if err != nil {
				return fmt.Errorf("records of %s: %w", id, err)
			}
			if len(recs) > 0 {
				out[id] = recs
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// errorList collects failures from many goroutines and reports the first few
// in full, so a systematic failure does not flood the log.
type errorList struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *errorList) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 20 {
		e.first = append(e.first, fmt.Sprintf(format, args...))
	}
}

func (e *errorList) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

func (e *errorList) report(t testing.TB, what string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		return
	}
	t.Errorf("%d %s; first ones:\n  %s", e.n, what, strings.Join(e.first, "\n  "))
}
