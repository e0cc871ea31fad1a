package tests

// The README's Go examples name only what the packages export: a renamed or removed function
// fails here, not in a user's editor.

import (
	"go/importer"
	"go/token"
	"go/types"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestReadmeNamesWhatExists(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go example in README.md")
	}
	imp := importer.ForCompiler(token.NewFileSet(), "source", nil)
	pkgs := map[string]*types.Package{}
	sel := regexp.MustCompile(`\b([a-z]+)\.([A-Z]\w*)`)
	checked := 0
	for _, b := range blocks {
		imports := map[string]string{} // name → path
		for _, m := range regexp.MustCompile(`"(github\.com/admitter/admitter/[\w/]+)"`).FindAllStringSubmatch(b[1], -1) {
			imports[m[1][strings.LastIndex(m[1], "/")+1:]] = m[1]
		}
		for _, m := range sel.FindAllStringSubmatch(b[1], -1) {
			path, ok := imports[m[1]]
			if !ok {
				continue
			}
			pkg := pkgs[path]
			if pkg == nil {
				if pkg, err = imp.Import(path); err != nil {
					t.Fatalf("import %s: %v", path, err)
				}
				pkgs[path] = pkg
			}
			if pkg.Scope().Lookup(m[2]) == nil {
				t.Errorf("README.md names %s.%s, which package %s does not export", m[1], m[2], path)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no name of admitter's packages checked in README's Go examples")
	}
}
