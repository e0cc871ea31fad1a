package tests

// The README's Go examples name only what the packages export: a renamed or removed function
// fails here, not in a user's editor.

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func TestReadmeNamesWhatExists(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("no Go example in README.md")
	}
	var paths []string
	for _, m := range regexp.MustCompile(`"(github\.com/admitter/admitter/[\w/]+)"`).FindAllStringSubmatch(readme, -1) {
		paths = append(paths, m[1])
	}
	imp := exportImporter(t, paths)
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

// exportImporter imports paths (and what they import) from the compiler's export data, as
// `go list -export` finds it in the build cache: the source importer type-checked every
// dependency from source (25 s under the race detector beside the other tests; well under a second this way, once built).
func exportImporter(t *testing.T, paths []string) types.Importer {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export %v: %v", paths, err)
	}
	files := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(l, "\t"); ok && file != "" {
			files[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

// TestReadmeSaysHowToInstallWhatItRuns: every program the README's commands run beside admitter
// (the nats CLI, a nats-server of your own) is installed by a `go install` line of the README,
// at a version, and the nats-server it installs is the one admitter is built and tested against
// (go.mod). Before, the README used `nats pub` and a server of your own without saying where
// either comes from.
func TestReadmeSaysHowToInstallWhatItRuns(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	installs := map[string]string{} // package path → version
	for _, m := range regexp.MustCompile(`go install ([\w./-]+)@(v[0-9]+\.[0-9]+\.[0-9]+)\b`).FindAllStringSubmatch(string(readme), -1) {
		installs[m[1]] = m[2]
	}
	for _, c := range []struct {
		program, uses, pkg string // the program, a command of the README that runs it, its package
	}{
		{"nats", "    nats pub jobs.submit.", "github.com/nats-io/natscli/nats"},
		{"nats-server", "nats-server -js", "github.com/nats-io/nats-server/v2"},
	} {
		if !strings.Contains(string(readme), c.uses) {
			t.Errorf("the README does not run %s (%q)", c.program, c.uses)
		}
		if installs[c.pkg] == "" {
			t.Errorf("the README runs %s but never says how to install it (go install %s@<version>)", c.program, c.pkg)
		}
	}
	server := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 (v\S+)`).FindSubmatch(gomod)
	if server == nil {
		t.Fatal("go.mod requires no nats-server")
	}
	if got := installs["github.com/nats-io/nats-server/v2"]; got != "" && got != string(server[1]) {
		t.Errorf("the README installs nats-server %s, admitter is tested against %s (go.mod)", got, server[1])
	}
}
