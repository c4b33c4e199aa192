package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// copiedRe matches a code block copied from a compiled file: a "<!-- copied from PATH -->" line
// (PATH relative to the document), then the fenced block.
var copiedRe = regexp.MustCompile("(?m)^<!-- copied from (\\S+) -->\n```\\w*\n((?s:.*?))^```$")

// TestCopiedSnippets checks that every code block marked "copied from" a file is still in that
// file word for word (a block may leave out the tabs that indent it in the file), so that the documents' recipes are code that compiles and is tested
// (examples/tcc-outbox's, for instance).
func TestCopiedSnippets(t *testing.T) {
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range append(docs, "../README.md") {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range copiedRe.FindAllStringSubmatch(string(text), -1) {
			n++
			src := filepath.Join(filepath.Dir(doc), m[1])
			code, err := os.ReadFile(src)
			if err != nil {
				t.Errorf("%s: copied from %s: %v", doc, m[1], err)
				continue
			}
			if !containsIndented(string(code), m[2]) {
				t.Errorf("%s: a block copied from %s is no longer in it; copy it again:\n%s", doc, m[1], m[2])
			}
		}
	}
	if n == 0 {
		t.Fatal(`no "<!-- copied from PATH -->" block found: the pattern no longer matches the documents`)
	}
}

// containsIndented reports whether code contains block as it is, or with every non-empty line
// indented by the same one to three tabs more.
func containsIndented(code, block string) bool {
	for k := range 4 {
		lines := strings.SplitAfter(block, "\n")
		for i, l := range lines {
			if strings.TrimSpace(l) != "" {
				lines[i] = strings.Repeat("\t", k) + l
			}
		}
		if strings.Contains(code, strings.Join(lines, "")) {
			return true
		}
	}
	return false
}
