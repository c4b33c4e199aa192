// Command testreport reads `go test -json` output on stdin, prints each package's result, the
// output of every failed test, and a closing line "N passed, N failed, N skipped". It exits 1 when
// any test failed or was skipped (a skip in CI means a test did not run against its server), or
// when no test ran at all.
//
//	go test -json ./... | go run ./tools/testreport
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type report struct {
	passed, failed, skipped int
	output                  map[string][]string // package/test -> lines
	failedTests, skips      []string
	badPkgs                 []string
}

func main() {
	code, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// run reads `go test -json` output from in, writes the report to out and returns the exit code:
// 0 when tests ran and every one passed, 1 otherwise. An error means in could not be read.
func run(in io.Reader, out io.Writer) (int, error) {
	r := &report{output: map[string][]string{}}
	if err := r.read(in, out); err != nil {
		return 0, err
	}
	return r.finish(out), nil
}

func (r *report) read(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// Errors from go itself, make and the like arrive as plain text.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := ev.Package + " " + ev.Test
		switch ev.Action {
		case "build-output":
			// Compiler errors (Go 1.24+ reports them as JSON); the package's "fail" follows.
			fmt.Fprint(out, ev.Output)
		case "output":
			r.output[key] = append(r.output[key], ev.Output)
		case "pass":
			if ev.Test == "" {
				fmt.Fprintf(out, "ok   %s (%.1fs)\n", ev.Package, ev.Elapsed)
			} else {
				r.passed++
			}
			delete(r.output, key)
		case "skip":
			if ev.Test == "" {
				delete(r.output, key)
				continue // a package without tests
			}
			r.skipped++
			r.skips = append(r.skips, key+": "+lastLine(r.output[key]))
			delete(r.output, key)
		case "fail":
			if ev.Test == "" {
				fmt.Fprintf(out, "FAIL %s (%.1fs)\n", ev.Package, ev.Elapsed)
				r.badPkgs = append(r.badPkgs, ev.Package)
				if lines := r.output[key]; len(lines) > 0 {
					fmt.Fprint(out, indent(lines))
				}
			} else {
				r.failed++
				r.failedTests = append(r.failedTests, key)
				fmt.Fprintf(out, "--- FAIL: %s (%.1fs)\n%s", key, ev.Elapsed, indent(r.output[key]))
			}
			delete(r.output, key)
		}
	}
	return sc.Err()
}

func (r *report) finish(out io.Writer) int {
	code := 0
	if len(r.skips) > 0 {
		sort.Strings(r.skips)
		fmt.Fprintf(out, "\n%d test(s) skipped; every test must run against the real servers:\n", len(r.skips))
		for _, s := range r.skips {
			fmt.Fprintln(out, "  "+s)
		}
		code = 1
	}
	if len(r.failedTests) > 0 || len(r.badPkgs) > 0 {
		fmt.Fprintf(out, "\nfailed: %s\n", strings.Join(append(r.failedTests, r.badPkgs...), ", "))
		code = 1
	}
	if r.passed+r.failed == 0 {
		fmt.Fprintln(out, "\nno test ran")
		code = 1
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
	return code
}

func lastLine(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if s := strings.TrimSpace(lines[i]); s != "" && !strings.HasPrefix(s, "---") {
			return s
		}
	}
	return ""
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			continue
		}
		b.WriteString("    " + l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}
