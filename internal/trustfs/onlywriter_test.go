package trustfs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// putsFiles are the calls that create a file or put one at a name by path
// (or by a descriptor this package did not check): outside trustfs they would
// be a second "temp file, then rename" beside Temp.
var putsFiles = map[string]map[string]bool{
	"os":                    {"Rename": true, "Link": true, "Symlink": true, "Create": true, "CreateTemp": true, "WriteFile": true},
	"io/ioutil":             {"WriteFile": true, "TempFile": true},
	"syscall":               {"Rename": true, "Renameat": true, "Link": true, "Linkat": true, "Symlink": true, "Creat": true},
	"golang.org/x/sys/unix": {"Rename": true, "Renameat": true, "Renameat2": true, "Link": true, "Linkat": true, "Symlink": true, "Symlinkat": true, "Creat": true},
}

// TestTempIsTheOnlyWriter: no production code of the module outside this
// package creates, renames or links a file itself. The store's creation
// (Temp.Link), replace (Temp.Rename), set-aside (Dir.Link) and install-cni
// (Temp.Rename) all go through a checked Dir, so the contract in the package
// doc holds for every file hostlease puts into place.
func TestTempIsTheOnlyWriter(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := filepath.Abs(".")
	var files int
	for _, top := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if path == self || path == filepath.Join(root, "internal", "testing") {
					return filepath.SkipDir // this package; helpers only tests import
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			files++
			for _, hit := range filePuts(t, path) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: %s puts a file into place by itself; use a trustfs.Dir (CreateTemp, then Rename or Link)", rel, hit)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 50 {
		t.Fatalf("scanned %d Go files under %s: the module's layout moved", files, root)
	}
}

// filePuts lists the calls of putsFiles in the Go file at path, each as
// "line N: pkg.Func".
func filePuts(t *testing.T, path string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{} // local name -> import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
	}
	var hits []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && putsFiles[imports[x.Name]][sel.Sel.Name] {
			hits = append(hits, "line "+strconv.Itoa(fset.Position(sel.Pos()).Line)+": "+x.Name+"."+sel.Sel.Name)
		}
		return true
	})
	return hits
}
