package exapp

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The examples are programs a user copies: their code (tests aside, which get the servers from
// internal/testkit/testenv) imports no txkit/internal package. The drills (drills/...) may.
func TestExamplesImportNoInternal(t *testing.T) {
	const internal = "github.com/txkit/txkit/internal"
	files := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
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
