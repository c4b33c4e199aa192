package exapp

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The examples are programs a user copies: their code (tests aside, which get the servers from
// internal/testkit/testenv) imports no txkit/internal package. The drills (drills/...) may, and
// so may a file built only into the drills' binaries (//go:build drill), which a copy leaves out.
func TestExamplesImportNoInternal(t *testing.T) {
	const internal = "github.com/txkit/txkit/internal"
	files := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if drillOnly(f) {
			return nil
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == internal || strings.HasPrefix(p, internal+"/") {
				t.Errorf("%s imports %s: an example uses public packages only", filepath.ToSlash(path), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("read %d Go files under examples/; want every example's", files)
	}
}

// drillOnly reports whether f is built only with the tag drill.
func drillOnly(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if x, err := constraint.Parse(c.Text); err == nil && x.String() == "drill" {
				return true
			}
		}
	}
	return false
}
