package daemon

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hostlease/hostlease/pkg/reclaim"
	"github.com/prometheus/client_golang/prometheus"
)

// The golden tests pin what the daemon says to the outside: metric names and
// their label names, the label values and stored verdicts (reasons, results,
// classes, states), the Events it posts, and every string literal of its
// production code (log, audit and Event texts included). A refactoring that
// moves code between packages keeps them; a deliberate change is made with
// -update and shows in the diff of testdata/golden.

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden from the code")

// goldenSourceDirs are the directories whose production code the string
// golden covers: this package and pkg/reclaim, the daemon's judgement, whose
// reasons, details and proof texts the daemon logs, audits and posts.
var goldenSourceDirs = []string{".", "../reclaim"}

// goldenSkipFiles are files whose strings are HTTP plumbing, not a contract
// (they change with the listener's own work).
var goldenSkipFiles = map[string]bool{"listener.go": true, "scrape.go": true}

func checkGolden(t *testing.T, name string, lines []string) {
	t.Helper()
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		var diff []string
		for _, l := range wl {
			if !slices.Contains(gl, l) {
				diff = append(diff, "- "+l)
			}
		}
		for _, l := range gl {
			if !slices.Contains(wl, l) {
				diff = append(diff, "+ "+l)
			}
		}
		t.Errorf("%s differs from the code (-golden +code; -update rewrites it after a deliberate change):\n%s", path, strings.Join(diff, "\n"))
	}
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// TestGoldenMetricNames pins every metric the collector describes, with its
// label names.
func TestGoldenMetricNames(t *testing.T) {
	m := NewMetrics(nil)
	ch := make(chan *prometheus.Desc, 64)
	m.Describe(ch)
	close(ch)
	var lines []string
	for d := range ch {
		sm := descRE.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("cannot parse %s", d)
		}
		labels := strings.Fields(strings.ReplaceAll(sm[2], ",", " "))
		slices.Sort(labels)
		lines = append(lines, sm[1]+"{"+strings.Join(labels, ",")+"}")
	}
	slices.Sort(lines)
	checkGolden(t, "metrics.txt", lines)
}

// TestGoldenValues pins the label values and stored verdicts.
func TestGoldenValues(t *testing.T) {
	var lines []string
	add := func(kind string, vs ...string) {
		for _, v := range vs {
			lines = append(lines, kind+" "+v)
		}
	}
	for _, r := range reclaim.ReleaseReasons {
		add("reclaim", string(r))
	}
	for _, r := range []reclaim.Reason{reclaim.KeepLive, reclaim.KeepStale, reclaim.KeepAbsent, reclaim.KeepInFlight, reclaim.KeepVetoed, reclaim.KeepGuarded, reclaim.KeepCRIUnavailable, reclaim.KeepAPIUnavailable} {
		add("keep", string(r))
	}
	add("veto", VetoPodListsIP, VetoMassReclaimGuard)
	add("rereserve", reclaim.ReReserveUnrecorded, reclaim.ReReserveOtherOwner, reclaim.ReReserveDamaged, reclaim.ReReserveIfName)
	add("sweep", SweepOK, SweepCRIError, SweepStoreError)
	add("class", ClassEnvironment, ClassUnreadable, ClassDamagedPage, ClassOther)
	add("netns", reclaim.NetnsProofVerified, reclaim.NetnsProofUnreadable, reclaim.NetnsProofLiveMissing, reclaim.NetnsProofOtherDir, reclaim.NetnsProofElsewhere, reclaim.NetnsProofNoWitness, reclaim.NetnsProofNoNetns)
	add("sandbox", reclaim.SandboxReady, reclaim.SandboxNotReady, reclaim.SandboxUnknown, reclaim.SandboxAbsent)
	checkGolden(t, "values.txt", lines)
}

// goldenFiles parses the production files of goldenSourceDirs.
func goldenFiles(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, dir := range goldenSourceDirs {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			base := filepath.Base(name)
			if strings.HasSuffix(base, "_test.go") || goldenSkipFiles[base] {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	return fset, files
}

// constStrings maps each string constant the files declare to its value.
func constStrings(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							out[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return out
}

// TestGoldenEvents pins the type and reason of every Kubernetes Event the
// daemon posts (each call of the Event method).
func TestGoldenEvents(t *testing.T) {
	_, files := goldenFiles(t)
	consts := constStrings(files)
	value := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, _ := strconv.Unquote(e.Value)
			return s
		case *ast.Ident:
			if v, ok := consts[e.Name]; ok {
				return v
			}
		case *ast.SelectorExpr:
			if v, ok := consts[e.Sel.Name]; ok {
				return v
			}
		}
		return fmt.Sprintf("<%T>", e)
	}
	var lines []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr: // Kube.Event(ctx, api, record, type, reason, message)
				if fn.Sel.Name == "Event" && len(call.Args) == 6 {
					lines = append(lines, value(call.Args[3])+" "+value(call.Args[4]))
				}
			case *ast.Ident: // report's event(reReserve, type, reason, message)
				if fn.Name == "event" && len(call.Args) == 4 {
					lines = append(lines, value(call.Args[1])+" "+value(call.Args[2]))
				}
			}
			return true
		})
	}
	// A call whose type or reason is a parameter is pinned at its callers.
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, "<") })
	slices.Sort(lines)
	lines = slices.Compact(lines)
	if len(lines) < 5 {
		t.Fatalf("found only %d Events: %q", len(lines), lines)
	}
	checkGolden(t, "events.txt", lines)
}

// TestGoldenStrings pins every string literal of the production code: the
// log, audit, Event and CLI texts the daemon writes stay what they were.
func TestGoldenStrings(t *testing.T) {
	_, files := goldenFiles(t)
	var lines []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				return false // import paths move with the code
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					lines = append(lines, n.Value)
				}
			}
			return true
		})
	}
	slices.Sort(lines)
	checkGolden(t, "strings.txt", lines)
}
