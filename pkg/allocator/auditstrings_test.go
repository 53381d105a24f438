package allocator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The audit log is read by operators, scripts and the daemon (which reports
// the plugin's releases by their reason): its action, reason and actor
// strings are an interface. These tests pin every one the allocator, the
// store and the plugin write, so that a refactoring that changes one fails
// here rather than in an operator's grep.

func TestAuditConstantsGolden(t *testing.T) {
	got := map[string]string{
		"AuditRelease":                AuditRelease,
		"AuditGC":                     AuditGC,
		"AuditImport":                 AuditImport,
		"AuditManualRelease":          AuditManualRelease,
		"AuditIndexRepair":            AuditIndexRepair,
		"AuditDamagedRelease":         AuditDamagedRelease,
		"AuditHostLocalGone":          AuditHostLocalGone,
		"AuditImportConflict":         AuditImportConflict,
		"AuditDamagedEntry":           AuditDamagedEntry,
		"AuditReclaim":                AuditReclaim,
		"AuditReReserve":              AuditReReserve,
		"AuditRebuild":                AuditRebuild,
		"ReasonPodSandboxReplaced":    ReasonPodSandboxReplaced,
		"ReasonNetnsGoneAtExhaustion": ReasonNetnsGoneAtExhaustion,
		"ByPlugin":                    ByPlugin,
		"ByDaemon":                    ByDaemon,
		`ByCLI("verb")`:               ByCLI("verb"),
		"DamagedPlaceholder":          DamagedPlaceholder,
		"IndexRepair.String": IndexRepair{Why: "why", Records: 1, BitsSet: 2, BitsCleared: 3,
			OwnerAdded: 4, OwnerRemoved: 5, PodAdded: 6, PodRemoved: 7, CountWas: 8}.String(),
		"IndexRepair.String (no pod change)": IndexRepair{Why: "why", CountWas: -1}.String(),
	}
	want := map[string]string{
		"AuditRelease":                "release",
		"AuditGC":                     "gc",
		"AuditImport":                 "import",
		"AuditManualRelease":          "manual-release",
		"AuditIndexRepair":            "index-repair",
		"AuditDamagedRelease":         "damaged-release",
		"AuditHostLocalGone":          "hostlocal-gone",
		"AuditImportConflict":         "import-conflict",
		"AuditDamagedEntry":           "damaged-entry",
		"AuditReclaim":                "reclaim",
		"AuditReReserve":              "re-reserve",
		"AuditRebuild":                "rebuild",
		"ReasonPodSandboxReplaced":    "pod_sandbox_replaced",
		"ReasonNetnsGoneAtExhaustion": "netns_gone_at_exhaustion",
		"ByPlugin":                    "plugin",
		"ByDaemon":                    "hostlease-gc",
		`ByCLI("verb")`:               "cli:verb",
		"DamagedPlaceholder":          "hostlease-damaged-record",
		"IndexRepair.String": "why: 1 records; taken bitmap: 2 bits set, 3 cleared; owner index: 4 entries added, 5 removed" +
			"; pod index: 6 entries added, 7 removed; records count was 8",
		"IndexRepair.String (no pod change)": "why: 0 records; taken bitmap: 0 bits set, 0 cleared; owner index: 0 entries added, 0 removed; records count was -1",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q (an audit string is an interface: do not change it)", k, got[k], w)
		}
	}
	if !slices.Equal(PluginReasons, []string{"pod_sandbox_replaced", "netns_gone_at_exhaustion"}) {
		t.Errorf("PluginReasons = %q", PluginReasons)
	}
}

// auditStringsGolden is every action, reason and actor expression the
// non-test code of the allocator, the store and the plugin writes into an
// audit entry (Why and AuditEvent literals, the why of an index repair),
// and every CLI verb named as an actor anywhere. String literals and
// fmt.Sprintf formats are kept verbatim; other expressions are shown as
// their identifier, or … when they are computed.
var auditStringsGolden = []string{
	`Action=…`,
	`Action=AuditDamagedEntry`,
	`Action=AuditDamagedRelease`,
	`Action=AuditGC`,
	`Action=AuditHostLocalGone`,
	`Action=AuditImport`,
	`Action=AuditImportConflict`,
	`Action=AuditIndexRepair`,
	`Action=AuditManualRelease`,
	`By="hostlease"`,
	`By=ByPlugin`,
	`By=by`,
	`By=…`,
	`Reason="DEL"`,
	`Reason="allocation failed"`,
	`Reason="host-local reservation file removed (host-local DEL)"`,
	`Reason="not in cni.dev/valid-attachments"`,
	`Reason=Sprintf("%d reservations from %s")`,
	`Reason=Sprintf("entry under the damaged key %x (no audit sequence; kept, never overwritten): %s")`,
	`Reason=TrimSpace(…+" (record did not decode: "+…+")")`,
	`by=cli:export`,
	`by=cli:import`,
	`by=cli:rebuild`,
	`by=cli:release`,
	`repair="open: a derived index or the records count was missing"`,
	`repair=Sprintf("ADD: %s has a record but the taken bitmap marked it free")`,
	`repair=Sprintf("ADD: requested %s has a record but the taken bitmap marked it free")`,
	`why=Sprintf("lookup of container %s ifname %q: %d records missing from the owner index")`,
	`why=Sprintf("lookup of container %s ifname %q: the indexes disagree with the records count")`,
	`why=Sprintf("root entries %s were plain values, not buckets (damage): made anew, the indexes rebuilt from the records; "+"what they held is lost (audit entries, exhaustion counters) and their pages stay unreachable until ` + "`hostlease-gc rebuild`" + `")`,
}

func TestAuditStringsGolden(t *testing.T) {
	var got []string
	add := func(s string) {
		if !slices.Contains(got, s) {
			got = append(got, s)
		}
	}
	for _, dir := range []string{".", "store", "../../cmd/ipam"} {
		for _, f := range parseDir(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					if name := typeName(n.Type); name == "Why" || name == "AuditEvent" {
						for _, e := range n.Elts {
							kv, ok := e.(*ast.KeyValueExpr)
							if !ok {
								continue
							}
							if k, _ := kv.Key.(*ast.Ident); k != nil && (k.Name == "Action" || k.Name == "Reason" || k.Name == "By") {
								v := render(kv.Value)
								if k.Name == "Reason" && v == "…" {
									continue // passed through (why.Reason, r.String(), c.reason(dir)): pinned where it is made
								}
								add(k.Name + "=" + v)
							}
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "RepairIndexes" && len(n.Args) > 0 {
						if _, isIdent := n.Args[0].(*ast.Ident); !isIdent {
							add("repair=" + render(n.Args[0]))
						}
					}
				case *ast.AssignStmt:
					for i, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok && id.Name == "why" && i < len(n.Rhs) {
							if _, isLit := n.Rhs[i].(*ast.CompositeLit); !isLit {
								add("why=" + render(n.Rhs[i]))
							}
						}
					}
				}
				return true
			})
		}
	}
	// Every CLI verb named as an actor, wherever the CLI is.
	for _, dir := range walkDirs(t, "../../cmd", "../../pkg") {
		for _, f := range parseDir(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok && typeName(c.Fun) == "ByCLI" && len(c.Args) == 1 {
					if lit, ok := c.Args[0].(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						add("by=" + ByCLI(s))
					}
				}
				return true
			})
		}
	}
	slices.Sort(got)
	want := slices.Clone(auditStringsGolden)
	slices.Sort(want)
	for _, s := range got {
		if !slices.Contains(want, s) {
			t.Errorf("new or changed audit string: %s", s)
		}
	}
	for _, s := range want {
		if !slices.Contains(got, s) {
			t.Errorf("audit string gone or changed: %s", s)
		}
	}
}

func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*ast.File
	fset := token.NewFileSet()
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

func walkDirs(t *testing.T, roots ...string) []string {
	t.Helper()
	var out []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// typeName is the name of a type or function expression (X or pkg.X).
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// render shows an audit string expression: literals and Sprintf formats
// verbatim, package-level names by name, anything computed as ….
func render(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		return e.Value
	case *ast.Ident:
		if e.Name == "by" {
			return e.Name
		}
		if len(e.Name) > 0 && e.Name[0] >= 'A' && e.Name[0] <= 'Z' {
			return e.Name
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "allocator" {
			return e.Sel.Name
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return render(e.X) + "+" + render(e.Y)
		}
	case *ast.CallExpr:
		if typeName(e.Fun) == "Sprintf" && len(e.Args) > 0 {
			return "Sprintf(" + render(e.Args[0]) + ")"
		}
		if typeName(e.Fun) == "TrimSpace" && len(e.Args) == 1 {
			return "TrimSpace(" + render(e.Args[0]) + ")"
		}
	}
	return "…"
}
