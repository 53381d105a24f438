package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/allocator"
	"github.com/hostlease/hostlease/pkg/daemon"
)

// jsonNames lists the JSON names of t's fields as encoding/json writes them:
// an embedded struct's fields inline, a nested struct's as "outer.inner",
// with ",omitempty"-style options kept so that a change of them shows too.
func jsonNames(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonNames(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if opts != "" {
			name += "," + opts
		}
		out = append(out, prefix+name)
		if ft := f.Type; ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeFor[allocator.Record]().PkgPath() {
			n, _, _ := strings.Cut(name, ",")
			out = append(out, jsonNames(ft, prefix+n+".")...)
		}
	}
	return out
}

// The `-o json` rows are what operators' scripts parse: their field names
// (and whether a field is left out when empty) are pinned here, so that a
// change to pkg/daemon/rows.go or to the stored record that would break a script
// fails a test. Adding a field means adding its name here; renaming one is a
// breaking change of the CLI.
func TestJSONRowNamesArePinned(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		typ  reflect.Type
		want string
	}{
		{"status", reflect.TypeFor[daemon.PoolRow](),
			"network rangeSet ranges size,omitempty used free,omitempty pending leakCandidates exhaustions damaged ip,omitempty damage,omitempty note,omitempty error,omitempty readOnly,omitempty"},
		{"leaks", reflect.TypeFor[daemon.LeakRow](),
			"network ip pod,omitempty sandbox state ageSeconds verdict reason detail"},
		{"audit", reflect.TypeFor[daemon.AuditRow](),
			"network time action reason,omitempty ip,omitzero containerID,omitempty ifName,omitempty pod,omitempty podUID,omitempty by,omitempty"},
		{"list (damaged record)", reflect.TypeFor[daemon.DamagedRow](),
			"ip network state error containerID,omitempty ifName,omitempty"},
		{"list (record)", reflect.TypeFor[daemon.ListRow](),
			"ip prefixLen gateway,omitzero rangeSet containerID ifName network podNamespace,omitempty podName,omitempty podUID,omitempty " +
				"netns,omitempty netnsWitness,omitzero netnsWitness.dir,omitzero netnsWitness.dir.dev netnsWitness.dir.ino netnsWitness.dir.handle,omitempty netnsWitness.existed,omitempty netnsWitness.netns,omitzero netnsWitness.netns.dev netnsWitness.netns.ino " +
				"state source,omitempty created committed,omitzero obs,omitzero " +
				"obs.misses,omitempty obs.firstMissed,omitzero obs.verdict,omitempty obs.sandboxState,omitempty"},
	} {
		if got := jsonNames(c.typ, ""); !slices.Equal(got, strings.Fields(c.want)) {
			t.Errorf("%s -o json (%s): fields\n  %s\nwant\n  %s", c.cmd, c.typ, strings.Join(got, " "), c.want)
		}
	}
	// list's rows are the stored record's fields, less the store's internal
	// format version: a field added to the record shows here.
	stored := slices.DeleteFunc(jsonNames(reflect.TypeFor[allocator.Record](), ""), func(n string) bool { return n == "v" })
	if got := jsonNames(reflect.TypeFor[daemon.ListRow](), ""); !slices.Equal(got, stored) {
		t.Errorf("list -o json fields\n  %s\ndiffer from the stored record's\n  %s", strings.Join(got, " "), strings.Join(stored, " "))
	}
}
