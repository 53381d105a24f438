package allocator

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// PluginReleases, the plugin's whole rule: a record goes only when its netns
// is provably torn down in the ADD's view, and then only when it is another
// sandbox of the ADD's pod, or any sandbox on an exhausted range set.
func TestPluginReleases(t *testing.T) {
	add := Owner{ContainerID: "B", IfName: "eth0", PodNamespace: "ns", PodName: "web-0", PodUID: "uid-1"}
	samePod := &Record{ContainerID: "A", IfName: "eth0", PodNamespace: "ns", PodName: "web-0", PodUID: "uid-1"}
	sameNameOtherUID := &Record{ContainerID: "A", IfName: "eth0", PodNamespace: "ns", PodName: "web-0", PodUID: "uid-2"}
	otherPod := &Record{ContainerID: "C", IfName: "eth0", PodNamespace: "ns", PodName: "db-0", PodUID: "uid-3"}
	noPod := &Record{ContainerID: "D", IfName: "eth0"}
	own := &Record{ContainerID: "B", IfName: "eth1", PodUID: "uid-1"}
	imported := &Record{ContainerID: "A", IfName: "eth0", PodUID: "uid-1", Source: SourceHostLocal}
	gone := fs.ErrNotExist
	eacces := fs.ErrPermission
	cases := []struct {
		name      string
		r         *Record
		add       Owner
		exhausted bool
		ev        NetnsEvidence
		err       error
		want      string
	}{
		{"same pod, other sandbox, netns provably gone", samePod, add, false, NetnsProvable, gone, ReasonPodSandboxReplaced},
		{"same pod on an exhausted set: still the pod's reason", samePod, add, true, NetnsProvable, gone, ReasonPodSandboxReplaced},
		{"same pod, netns present (a live sandbox)", samePod, add, false, NetnsProvable, nil, ""},
		{"same pod, lstat doubt (EACCES)", samePod, add, false, NetnsProvable, eacces, ""},
		{"same pod, no witness", samePod, add, false, NetnsNoWitness, gone, ""},
		{"same pod, netns never existed at ADD", samePod, add, false, NetnsNeverExisted, gone, ""},
		{"same pod, /proc or unnamed netns", samePod, add, false, NetnsUnnamed, gone, ""},
		{"same pod, netns outside the ADD's directory", samePod, add, false, NetnsElsewhere, gone, ""},
		{"same pod, directory unreadable", samePod, add, false, NetnsDirUnseen, gone, ""},
		{"same pod, another view's directory", samePod, add, false, NetnsOtherDir, gone, ""},
		{"same pod, directory known by reusable numbers only", samePod, add, false, NetnsReusableID, gone, ""},
		{"same pod, path gone but its namespace still held", samePod, add, false, NetnsHeld, gone, ""},
		{"same pod, path gone, holders unreadable", samePod, add, false, NetnsHoldersUnseen, gone, ""},
		{"another pod, reusable numbers only, exhausted", otherPod, add, true, NetnsReusableID, gone, ""},
		{"another pod, namespace still held, exhausted", otherPod, add, true, NetnsHeld, gone, ""},
		{"another pod, holders unreadable, exhausted", otherPod, add, true, NetnsHoldersUnseen, gone, ""},
		{"same name, another UID (a recreated pod), not exhausted", sameNameOtherUID, add, false, NetnsProvable, gone, ""},
		{"same name, another UID, exhausted", sameNameOtherUID, add, true, NetnsProvable, gone, ReasonNetnsGoneAtExhaustion},
		{"another pod, netns gone, not exhausted", otherPod, add, false, NetnsProvable, gone, ""},
		{"another pod, netns gone, exhausted", otherPod, add, true, NetnsProvable, gone, ReasonNetnsGoneAtExhaustion},
		{"another pod, netns present, exhausted", otherPod, add, true, NetnsProvable, nil, ""},
		{"another pod, other view, exhausted", otherPod, add, true, NetnsOtherDir, gone, ""},
		{"no pod, netns gone, exhausted", noPod, add, true, NetnsProvable, gone, ReasonNetnsGoneAtExhaustion},
		{"ADD without a pod UID does not match records without one", noPod, Owner{ContainerID: "B"}, false, NetnsProvable, gone, ""},
		{"the ADD's own container", own, add, true, NetnsProvable, gone, ""},
		{"an imported host-local record", imported, add, true, NetnsProvable, gone, ""},
	}
	for _, tc := range cases {
		if got := PluginReleases(tc.r, tc.add, tc.exhausted, tc.ev, tc.err); got != tc.want {
			t.Errorf("%s: PluginReleases = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// fakeView is a NetnsView over a map: directories' identities and the netns
// paths that exist. It counts lstats.
type fakeView struct {
	dirs   map[string]DirID
	exists map[string]bool
	lstats int
	// held: the namespaces something holds; heldErr: they cannot be read;
	// walks counts Holders calls.
	held    NetnsHolders
	heldErr error
	walks   int
}

func (v *fakeView) Holders() (NetnsHolders, error) {
	v.walks++
	return v.held, v.heldErr
}

func (v *fakeView) DirID(dir string) (DirID, error) {
	if id, ok := v.dirs[dir]; ok {
		return id, nil
	}
	return DirID{}, fs.ErrNotExist
}

func (v *fakeView) Lstat(path string) error {
	v.lstats++
	if v.exists[path] {
		return nil
	}
	return fs.ErrNotExist
}

var runNetns = DirID{Dev: 25, Ino: 1000, Handle: "\x01\x00\x00\x00gen1"}

// nsOf is the namespace a test's netns path names (one per path).
func nsOf(netns string) NsID {
	h := fnv.New32a()
	h.Write([]byte(netns))
	return NsID{Dev: 4, Ino: 4026532000 + uint64(h.Sum32()%100000)}
}

func witnessOf(netns string) NetnsWitness {
	return NetnsWitness{Dir: runNetns, Existed: true, Netns: nsOf(netns)}
}

func podOwner(id, uid, netns string) Owner {
	return Owner{ContainerID: id, IfName: "eth0", Netns: netns, PodNamespace: "ns", PodName: "p-" + uid, PodUID: uid,
		NetnsWitness: witnessOf(netns)}
}

// Allocate with a view: a pod's dead sandbox is freed before the choice (the
// choice is still host-local's next address), a live one never; a full pool
// frees only provably dead records; without a view nothing is freed.
func TestAllocateReleasesDeadSandboxes(t *testing.T) {
	small := set(rng("10.0.0.0/29", "10.0.0.2", "10.0.0.4", "10.0.0.1")) // 3 addresses
	v := &fakeView{dirs: map[string]DirID{"/run/netns": runNetns}, exists: map[string]bool{}}
	s := newStore(t)
	alloc := func(o Owner) (string, error) {
		t.Helper()
		var ip string
		var err error
		update(t, s, func(tx Store) error {
			recs, aerr := Allocate(tx, AllocateRequest{Network: "net", RangeSets: []StoredRangeSet{small}, Owner: o, Now: time.Unix(1, 0), View: v})
			if aerr != nil {
				err = aerr
				return nil
			}
			ip = recs[0].IP.String()
			return nil
		})
		return ip, err
	}
	live := func(path string) { v.exists[path] = true }
	kill := func(path string) { delete(v.exists, path) }

	// A pod's retry loop holds one address: each sandbox's netns dies
	// before the next ADD; the choice moves on as host-local's does.
	for i, want := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.2", "10.0.0.3"} {
		ns := fmt.Sprintf("/run/netns/a%d", i)
		if i > 0 {
			kill(fmt.Sprintf("/run/netns/a%d", i-1))
		}
		live(ns)
		ip, err := alloc(podOwner(fmt.Sprintf("A%d", i), "uid-a", ns))
		if err != nil || ip != want {
			t.Fatalf("retry %d: got %s, %v; want %s", i, ip, err, want)
		}
		if n := s.count(); n != 1 {
			t.Fatalf("retry %d: %d records, want 1", i, n)
		}
	}
	last := s.audit[len(s.audit)-1]
	if last.Reason != ReasonPodSandboxReplaced || last.By != "plugin" || last.ContainerID != "A3" || last.Pod != "ns/p-uid-a" {
		t.Fatalf("audit = %+v", last)
	}

	// A live sandbox of the same pod stays.
	live("/run/netns/b0")
	if _, err := alloc(podOwner("B0", "uid-a", "/run/netns/b0")); err != nil {
		t.Fatal(err)
	}
	eq(t, "records with two live sandboxes of one pod", s.count(), 2)

	// The pool is full (A4, B0, C0 live): a live record of another pod is
	// never freed; the ADD fails as host-local's does.
	live("/run/netns/c0")
	c0, err := alloc(podOwner("C0", "uid-c", "/run/netns/c0"))
	if err != nil {
		t.Fatal(err)
	}
	live("/run/netns/d0")
	if _, err := alloc(podOwner("D0", "uid-d", "/run/netns/d0")); err == nil || s.count() != 3 {
		t.Fatalf("full pool of live sandboxes: err %v, %d records", err, s.count())
	}
	// C0's netns is torn down: the next ADD of another pod frees it.
	kill("/run/netns/c0")
	ip, err := alloc(podOwner("D0", "uid-d", "/run/netns/d0"))
	if err != nil || ip != c0 {
		t.Fatalf("full pool with a dead record: got %s, %v", ip, err)
	}
	if a := s.audit[len(s.audit)-1]; a.Reason != ReasonNetnsGoneAtExhaustion || a.ContainerID != "C0" {
		t.Fatalf("audit = %+v", a)
	}

	// Doubtful dead records on a full pool: kept, the ADD fails.
	doubt := map[string]func(*Record){
		"no witness":    func(r *Record) { r.NetnsWitness = NetnsWitness{} },
		"never existed": func(r *Record) { r.NetnsWitness.Existed = false },
		"/proc path":    func(r *Record) { r.Netns = "/proc/1234/ns/net" },
		"other view":    func(r *Record) { r.NetnsWitness.Dir = DirID{Dev: 40, Ino: 1000, Handle: runNetns.Handle} },
		// The device and inode the plugin saw, reused by a tmpfs mounted
		// in place of the old one or a directory created in place of it.
		"same numbers, another directory": func(r *Record) { r.NetnsWitness.Dir.Handle = "\x01\x00\x00\x00gen2" },
		"a witness by numbers only":       func(r *Record) { r.NetnsWitness.Dir.Handle = "" },
		"no namespace identity":           func(r *Record) { r.NetnsWitness.Netns = NsID{} },
		"namespace still held": func(r *Record) {
			if v.held == nil {
				v.held = NetnsHolders{}
			}
			v.held[r.NetnsWitness.Netns] = struct{}{}
		},
		"holders unreadable": func(r *Record) { v.heldErr = errors.New("no /proc") },
		"other dir":          func(r *Record) { r.Netns = "/var/run/other/x" },
		"host-local":         func(r *Record) { r.Source = SourceHostLocal },
	}
	for name, spoil := range doubt {
		ds := newStore(t)
		for i, ip := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
			r := rec(ip, fmt.Sprintf("X%d", i), "eth0")
			r.Netns, r.PodUID = fmt.Sprintf("/run/netns/gone%d", i), "uid-x"
			r.NetnsWitness = witnessOf(r.Netns)
			spoil(r)
			update(t, ds, func(tx Store) error { return tx.Put(r) })
		}
		var aerr error
		update(t, ds, func(tx Store) error {
			_, e := Allocate(tx, AllocateRequest{Network: "net", RangeSets: []StoredRangeSet{small}, Owner: podOwner("Y", "uid-x", "/run/netns/y"), Now: time.Unix(2, 0), View: v})
			if e != nil {
				aerr = e
			}
			return nil
		})
		if aerr == nil || ds.count() != 3 {
			t.Errorf("%s: a full pool of doubtful dead records: err %v, %d records (want exhaustion, 3)", name, aerr, ds.count())
		}
		v.held, v.heldErr = nil, nil
	}

	// Without a view (or a named netns for the ADD) nothing is judged.
	ns := newStore(t)
	r := rec("10.0.0.2", "A", "eth0")
	r.Netns, r.PodUID, r.NetnsWitness = "/run/netns/gone", "uid-n", NetnsWitness{Dir: runNetns, Existed: true}
	update(t, ns, func(tx Store) error { return tx.Put(r) })
	for _, req := range []AllocateRequest{
		{Owner: podOwner("B", "uid-n", "/run/netns/b")},
		{Owner: podOwner("B", "uid-n", "/proc/1/ns/net"), View: v},
	} {
		req.Network, req.RangeSets, req.Now = "net", []StoredRangeSet{small}, time.Unix(3, 0)
		update(t, ns, func(tx Store) error {
			if _, e := Allocate(tx, req); e != nil {
				return e
			}
			return undoAdd(tx, req.Owner.ContainerID)
		})
		if !ns.hasRecord(netip.MustParseAddr("10.0.0.2")) {
			t.Errorf("view %v, netns %s: the dead record was released", req.View != nil, req.Owner.Netns)
		}
	}
}

// undoAdd releases containerID's eth0 addresses.
func undoAdd(tx Store, containerID string) error {
	_, err := Release(tx, Attachment{ContainerID: containerID, IfName: "eth0"}, Why{By: "test"}, time.Unix(4, 0))
	if err != nil {
		return errors.New("release: " + err.Error())
	}
	return nil
}

// The walk for namespaces still held is made only when a record is about to
// be released, once per ADD however many are: an ADD that frees nothing
// (live sandboxes, doubtful records) never walks /proc.
func TestAllocateWalksHoldersOnlyToRelease(t *testing.T) {
	small := set(rng("10.0.0.0/29", "10.0.0.2", "10.0.0.4", "10.0.0.1")) // 3 addresses
	v := &fakeView{dirs: map[string]DirID{"/run/netns": runNetns}, exists: map[string]bool{}}
	s := newStore(t)
	alloc := func(o Owner) error {
		t.Helper()
		var err error
		update(t, s, func(tx Store) error {
			if _, aerr := Allocate(tx, AllocateRequest{Network: "net", RangeSets: []StoredRangeSet{small}, Owner: o, Now: time.Unix(1, 0), View: v}); aerr != nil {
				err = aerr
			}
			return nil
		})
		return err
	}
	for _, id := range []string{"a", "b", "c"} {
		ns := "/run/netns/" + id
		v.exists[ns] = true
		if err := alloc(podOwner(id, "uid-"+id, ns)); err != nil {
			t.Fatal(err)
		}
	}
	// Full, every sandbox live: exhaustion, no walk.
	v.exists["/run/netns/d"] = true
	if err := alloc(podOwner("d", "uid-d", "/run/netns/d")); err == nil {
		t.Fatal("a full pool of live sandboxes gave an address")
	}
	eq(t, "walks with nothing to release", v.walks, 0)
	// Two die: the next ADD frees both (one taken, one free) with one walk.
	delete(v.exists, "/run/netns/a")
	delete(v.exists, "/run/netns/b")
	if err := alloc(podOwner("d", "uid-d", "/run/netns/d")); err != nil {
		t.Fatal(err)
	}
	eq(t, "walks of an ADD that released two records", v.walks, 1)
	eq(t, "records", s.count(), 2)
}

// The kernel gives a freed namespace's inode number to the next namespace: a
// pod's retry typically gets its dead attempt's. That namespace, held by the
// ADD's own new sandbox, does not keep the dead record.
func TestAllocateNamespaceNumberReusedByTheADD(t *testing.T) {
	small := set(rng("10.0.0.0/29", "10.0.0.2", "10.0.0.4", "10.0.0.1"))
	for _, tc := range []struct {
		name    string
		heldBy  string // whose netns identity is held: "add" or "other"
		release bool
	}{
		{"the ADD's own new namespace has the dead record's number", "add", true},
		{"another live namespace has it", "other", false},
	} {
		v := &fakeView{dirs: map[string]DirID{"/run/netns": runNetns}, exists: map[string]bool{}}
		ds := newStore(t)
		dead := rec("10.0.0.2", "A0", "eth0")
		dead.Netns, dead.PodUID = "/run/netns/a0", "uid-a"
		dead.NetnsWitness = witnessOf(dead.Netns)
		update(t, ds, func(tx Store) error { return tx.Put(dead) })
		add := podOwner("A1", "uid-a", "/run/netns/a1")
		v.exists["/run/netns/a1"] = true
		add.NetnsWitness.Netns = dead.NetnsWitness.Netns // the number reused
		v.held = NetnsHolders{dead.NetnsWitness.Netns: {}}
		if tc.heldBy == "other" {
			add.NetnsWitness.Netns = nsOf("/run/netns/a1")
		}
		update(t, ds, func(tx Store) error {
			if _, e := Allocate(tx, AllocateRequest{Network: "net", RangeSets: []StoredRangeSet{small}, Owner: add, Now: time.Unix(2, 0), View: v}); e != nil {
				t.Errorf("%s: ADD: %v", tc.name, e)
			}
			return nil
		})
		if released := !ds.hasRecord(netip.MustParseAddr("10.0.0.2")) || ds.count() == 1; released != tc.release {
			t.Errorf("%s: dead record released = %v, want %v (%d records)", tc.name, released, tc.release, ds.count())
		}
	}
}

// addTwoPass runs an ADD as the plugin does with a HoldersWalk: a first
// transaction that does not walk, rolled back when it kept records for the
// walk; then the walk, between (what changes while the store is unlocked)
// and a second transaction. It returns the ADD's address
// (or error), the walks made inside transactions and the records the first
// one named. between runs after the walk: what it changes, the walk did not
// see.
func addTwoPass(t *testing.T, s *memStore, v *fakeView, sets []StoredRangeSet, o Owner, between func()) (ip string, aerr error, walksInside int, needed int) {
	t.Helper()
	errWalk := errors.New("walk first")
	w := &HoldersWalk{}
	for pass := 1; pass <= 2; pass++ {
		before := v.walks
		err := s.Update(func(tx Store) error {
			recs, e := Allocate(tx, AllocateRequest{Network: "net", RangeSets: sets, Owner: o, Now: time.Unix(5, 0), View: v, Walk: w})
			if w.Deferred() {
				return errWalk
			}
			if e != nil {
				aerr = e
				return nil
			}
			ip = recs[0].IP.String()
			return nil
		})
		walksInside += v.walks - before
		if !errors.Is(err, errWalk) {
			if err != nil {
				t.Fatal(err)
			}
			return ip, aerr, walksInside, len(w.Needed)
		}
		if pass == 2 {
			t.Fatal("the second transaction deferred again")
		}
		w.Holders, w.Err = v.Holders()
		w.Read = true
		if between != nil {
			between()
		}
	}
	return
}

// With the walk made outside the transaction (HoldersWalk), an ADD decides
// what it would decide walking inside it, and no transaction walks unless
// a record became a candidate after the walk; the walk is evidence only for
// the records it was made for, and only if their path is still gone.
func TestAllocateWalksOutsideTheTransaction(t *testing.T) {
	sets := []StoredRangeSet{set(rng("10.0.0.0/29", "10.0.0.2", "10.0.0.4", "10.0.0.1"))} // 3 addresses
	type state struct {
		s *memStore
		v *fakeView
	}
	put := func(st state, ip, id, uid, netns string, live bool) *Record {
		r := rec(ip, id, "eth0")
		r.Netns, r.PodUID, r.NetnsWitness = netns, uid, witnessOf(netns)
		update(t, st.s, func(tx Store) error { return tx.Put(r) })
		if live {
			st.v.exists[netns] = true
		}
		return r
	}
	add := podOwner("A1", "uid-a", "/run/netns/a1")
	cases := []struct {
		name    string
		setup   func(st state)
		between func(st state) // while the store is unlocked, after the walk
		wantIP  string         // the ADD's address; "" the ADD fails
		want    []string       // the records left (IPs)
		inside  int            // walks made inside a transaction
		needed  int            // records the first transaction kept for the walk
	}{
		{"nothing to judge: one transaction, no walk", func(st state) {}, nil,
			"10.0.0.2", []string{"10.0.0.2"}, 0, 0},
		{"the pod's dead sandbox is freed after the walk", func(st state) {
			put(st, "10.0.0.2", "A0", "uid-a", "/run/netns/a0", false)
		}, nil, "10.0.0.2", []string{"10.0.0.2"}, 0, 1},
		{"held at the walk: kept", func(st state) {
			r := put(st, "10.0.0.2", "A0", "uid-a", "/run/netns/a0", false)
			st.v.held = NetnsHolders{r.NetnsWitness.Netns: {}}
		}, nil, "10.0.0.3", []string{"10.0.0.2", "10.0.0.3"}, 0, 1},
		{"its path back before the second transaction: kept", func(st state) {
			put(st, "10.0.0.2", "A0", "uid-a", "/run/netns/a0", false)
		}, func(st state) { st.v.exists["/run/netns/a0"] = true },
			"10.0.0.3", []string{"10.0.0.2", "10.0.0.3"}, 0, 1},
		{"the ADD's own namespace number among those held: freed", func(st state) {
			r := put(st, "10.0.0.2", "A0", "uid-a", "/run/netns/a0", false)
			r.NetnsWitness.Netns = add.NetnsWitness.Netns // the number reused
			update(t, st.s, func(tx Store) error { return tx.Put(r) })
			st.v.held = NetnsHolders{add.NetnsWitness.Netns: {}}
		}, nil, "10.0.0.2", []string{"10.0.0.2"}, 0, 1},
		{"another allocation in its place after the walk, its namespace held: kept by a walk inside", func(st state) {
			put(st, "10.0.0.2", "A0", "uid-a", "/run/netns/a0", false)
		}, func(st state) {
			st.v.held = NetnsHolders{nsOf("/run/netns/a9"): {}}
			update(t, st.s, func(tx Store) error {
				r := rec("10.0.0.2", "A9", "eth0")
				r.Netns, r.PodUID, r.NetnsWitness = "/run/netns/a9", "uid-a", witnessOf("/run/netns/a9")
				r.Created = r.Created.Add(time.Second)
				_, err := Release(tx, Attachment{ContainerID: "A0", IfName: "eth0"}, Why{Reason: "test"}, time.Unix(4, 0))
				if err != nil {
					return err
				}
				return tx.Put(r)
			})
		}, "10.0.0.3", []string{"10.0.0.2", "10.0.0.3"}, 1, 1},
		{"a full pool: another pod's dead record freed after the walk", func(st state) {
			put(st, "10.0.0.2", "B0", "uid-b", "/run/netns/b0", true)
			put(st, "10.0.0.3", "C0", "uid-c", "/run/netns/c0", false)
			put(st, "10.0.0.4", "D0", "uid-d", "/run/netns/d0", true)
		}, nil, "10.0.0.3", []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, 0, 1},
		{"a full pool of live sandboxes: the ADD fails, nothing walked", func(st state) {
			put(st, "10.0.0.2", "B0", "uid-b", "/run/netns/b0", true)
			put(st, "10.0.0.3", "C0", "uid-c", "/run/netns/c0", true)
			put(st, "10.0.0.4", "D0", "uid-d", "/run/netns/d0", true)
		}, nil, "", []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}, 0, 0},
	}
	for _, tc := range cases {
		for _, twoPass := range []bool{false, true} {
			st := state{newStore(t), &fakeView{dirs: map[string]DirID{"/run/netns": runNetns}, exists: map[string]bool{add.Netns: true}}}
			tc.setup(st)
			var ip string
			var aerr error
			inside, needed := 0, 0
			if twoPass {
				var between func()
				if tc.between != nil {
					between = func() { tc.between(st) }
				}
				ip, aerr, inside, needed = addTwoPass(t, st.s, st.v, sets, add, between)
			} else {
				if tc.between != nil {
					tc.between(st) // the same state, judged in one transaction
				}
				update(t, st.s, func(tx Store) error {
					recs, e := Allocate(tx, AllocateRequest{Network: "net", RangeSets: sets, Owner: add, Now: time.Unix(5, 0), View: st.v})
					if e != nil {
						aerr = e
					} else {
						ip = recs[0].IP.String()
					}
					return nil
				})
			}
			mode := map[bool]string{false: "walk inside", true: "walk outside"}[twoPass]
			if ip != tc.wantIP || (aerr != nil) != (tc.wantIP == "") {
				t.Errorf("%s (%s): ADD got %q, %v; want %q", tc.name, mode, ip, aerr, tc.wantIP)
			}
			var left []string
			view(t, st.s, func(tx Store) error {
				return forEach(tx, func(r *Record) error { left = append(left, r.IP.String()); return nil })
			})
			if !slices.Equal(left, tc.want) {
				t.Errorf("%s (%s): records %v, want %v", tc.name, mode, left, tc.want)
			}
			if twoPass && (inside != tc.inside || needed != tc.needed) {
				t.Errorf("%s: %d walks inside a transaction, %d records kept for the walk; want %d, %d", tc.name, inside, needed, tc.inside, tc.needed)
			}
		}
	}
}
