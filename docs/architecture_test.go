// Package docs_test checks the facts of docs/ARCHITECTURE.md that the code can state: the import
// graph and the types that have Run and Close. Each is a block of the document between
// "<!-- begin NAME -->" and "<!-- end NAME -->" lines; the test fails when a block differs from
// what the tree says, and rewrites the blocks with
//
//	go test ./docs -run TestArchitecture -update
package docs_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/ARCHITECTURE.md")

const (
	doc    = "ARCHITECTURE.md"
	module = "github.com/txkit/txkit"
)

// programs are the trees of main packages and their harnesses, left out of the graph and the lists
// (they import everything and nothing imports them); docs is this test's own package.
var programs = []string{"examples", "drills", "cmd", "docs"}

// notAPI are the trees whose types are no part of the public API.
var notAPI = append([]string{"internal", "bench", "tools", "deploy"}, programs...)

func TestArchitecture(t *testing.T) {
	blocks := map[string]func(t *testing.T) string{
		"import-graph": importGraph,
		"run-list":     func(t *testing.T) string { return methodList(t, isRun) },
		"close-list":   func(t *testing.T) string { return methodList(t, isClose) },
	}
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := text
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range blocks {
			if !yield(k) {
				return
			}
		}
	}) {
		got, err := block(out, name)
		if err != nil {
			t.Fatal(err)
		}
		want := blocks[name](t)
		if got == want {
			continue
		}
		if *update {
			out = setBlock(out, name, want)
			continue
		}
		t.Errorf("%s: block %q is stale (refresh it with go test ./docs -run TestArchitecture -update):\n%s",
			doc, name, diff(got, want))
	}
	if *update && !bytes.Equal(out, text) {
		if err := os.WriteFile(doc, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// blockRe matches a block: its indent (that of its marker lines; a list item's block is indented),
// its begin line and its body, up to its end line.
func blockRe(name string) *regexp.Regexp {
	n := regexp.QuoteMeta(name)
	return regexp.MustCompile(`(?ms)^([ \t]*)<!-- begin ` + n + `[ >][^\n]*\n(.*?)^[ \t]*<!-- end ` + n + ` -->`)
}

// block returns the body of the block name, its indent and any ```text fence taken off.
func block(text []byte, name string) (string, error) {
	m := blockRe(name).FindSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("%s: no block %q (lines <!-- begin %s ... --> and <!-- end %s -->)", doc, name, name, name)
	}
	var b strings.Builder
	for line := range strings.Lines(string(m[2])) {
		b.WriteString(strings.TrimPrefix(line, string(m[1])))
	}
	s := strings.TrimPrefix(b.String(), "```text\n")
	return strings.TrimSuffix(s, "```\n"), nil
}

// setBlock replaces the body of the block name with body, indented as its markers are, in the
// ```text fence the old body had.
func setBlock(text []byte, name, body string) []byte {
	m := blockRe(name).FindSubmatchIndex(text)
	indent, old := string(text[m[2]:m[3]]), string(text[m[4]:m[5]])
	if strings.HasPrefix(strings.TrimPrefix(old, indent), "```text\n") {
		body = "```text\n" + body + "```\n"
	}
	var b strings.Builder
	for line := range strings.Lines(body) {
		b.WriteString(indent + line)
	}
	return slices.Concat(text[:m[4]], []byte(b.String()), text[m[5]:])
}

// importGraph is one line per package of the module, programs left out: the package, "->" and the
// module's packages it imports (test files left out), paths relative to the module.
func importGraph(t *testing.T) string {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var b strings.Builder
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg := rel(f[0])
		if under(pkg, programs) {
			continue
		}
		b.WriteString(pkg + " ->")
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				b.WriteString(" " + rel(imp))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

func under(pkg string, trees []string) bool {
	for _, tree := range trees {
		if pkg == tree || strings.HasPrefix(pkg, tree+"/") {
			return true
		}
	}
	return false
}

// methodList is the public types (package path relative to the module, dot, type) with a method
// that is, sorted, one code span a line.
func methodList(t *testing.T, is func(*ast.FuncDecl) bool) string {
	var names []string
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dir := strings.TrimPrefix(filepath.ToSlash(path), "../")
			if path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || under(dir, notAPI)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !is(fn) {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
				dir := strings.TrimPrefix(filepath.ToSlash(filepath.Dir(path)), "../")
				names = append(names, "`"+dir+"."+id.Name+"`")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",\n") + "\n"
}

// isRun: Run(ctx context.Context) error.
func isRun(fn *ast.FuncDecl) bool {
	p, r := fn.Type.Params.List, fn.Type.Results
	return fn.Name.Name == "Run" && len(p) == 1 && len(p[0].Names) <= 1 && expr(p[0].Type) == "context.Context" &&
		r != nil && len(r.List) == 1 && expr(r.List[0].Type) == "error"
}

// isClose: Close() error.
func isClose(fn *ast.FuncDecl) bool {
	r := fn.Type.Results
	return fn.Name.Name == "Close" && len(fn.Type.Params.List) == 0 &&
		r != nil && len(r.List) == 1 && expr(r.List[0].Type) == "error"
}

func expr(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return expr(e.X) + "." + e.Sel.Name
	}
	return ""
}

// diff lists the lines only in the document (-) and only in the tree (+).
func diff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
