package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const pkg = "github.com/txkit/txkit/demo"

// line is one `go test -json` event, marshalled the way test2json writes it.
func line(action, test, output string) string {
	b, err := json.Marshal(struct {
		Action  string
		Package string
		Test    string `json:",omitempty"`
		Output  string `json:",omitempty"`
	}{action, pkg, test, output})
	if err != nil {
		panic(err) // cannot happen: strings only
	}
	return string(b)
}

// passing is the event stream of a test that ran and passed.
func passing(test string) []string {
	return []string{
		line("run", test, ""),
		line("output", test, "=== RUN   "+test+"\n"),
		line("output", test, "--- PASS: "+test+" (0.00s)\n"),
		line("pass", test, ""),
	}
}

func stream(parts ...[]string) string {
	var all []string
	for _, p := range parts {
		all = append(all, p...)
	}
	return strings.Join(all, "\n") + "\n"
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		code     int
		want     []string // substrings of the report
		notWant  []string
		lastLine string
	}{
		{
			name: "all pass",
			in: stream(
				[]string{line("start", "", "")},
				passing("TestA"),
				passing("TestB"),
				[]string{line("output", "", "PASS\n"), line("output", "", "ok  \t"+pkg+"\t0.01s\n"), line("pass", "", "")},
			),
			code:     0,
			want:     []string{"ok   " + pkg},
			notWant:  []string{"skipped;", "failed:", "no test ran", "=== RUN"},
			lastLine: "2 passed, 0 failed, 0 skipped",
		},
		{
			name: "one skipped test fails the run and is listed",
			in: stream(
				passing("TestA"),
				[]string{
					line("run", "TestIntegrationPG", ""),
					line("output", "TestIntegrationPG", "=== RUN   TestIntegrationPG\n"),
					line("output", "TestIntegrationPG", "    pg_test.go:12: TXKIT_PG_URL is not set (-short)\n"),
					line("output", "TestIntegrationPG", "--- SKIP: TestIntegrationPG (0.00s)\n"),
					line("skip", "TestIntegrationPG", ""),
					line("pass", "", ""),
				},
			),
			code: 1,
			want: []string{
				"1 test(s) skipped; every test must run against the real servers:",
				"  " + pkg + " TestIntegrationPG: pg_test.go:12: TXKIT_PG_URL is not set (-short)\n",
			},
			notWant:  []string{"failed:", "no test ran"},
			lastLine: "1 passed, 0 failed, 1 skipped",
		},
		{
			name: "a failed test fails the run with its output",
			in: stream(
				passing("TestA"),
				[]string{
					line("run", "TestBad", ""),
					line("output", "TestBad", "=== RUN   TestBad\n"),
					line("output", "TestBad", "    x_test.go:7: state before\n"),
					line("output", "TestBad", "    x_test.go:7: boom\n"),
					line("output", "TestBad", "--- FAIL: TestBad (0.00s)\n"),
					line("fail", "TestBad", ""),
					line("output", "", "FAIL\n"),
					line("fail", "", ""),
				},
			),
			code: 1,
			want: []string{
				"--- FAIL: " + pkg + " TestBad",
				"x_test.go:7: state before\n",
				"x_test.go:7: boom\n",
				"FAIL " + pkg,
				"failed: " + pkg + " TestBad, " + pkg + "\n",
			},
			notWant:  []string{"=== RUN", "skipped;"},
			lastLine: "1 passed, 1 failed, 0 skipped",
		},
		{
			name: "tests pass but the package fails (leak check in TestMain)",
			in: stream(
				passing("TestA"),
				[]string{
					line("output", "", "testenv: 1 goroutine(s) leaked by the tests:\n"),
					line("output", "", "FAIL\t"+pkg+"\t5.1s\n"),
					line("fail", "", ""),
				},
			),
			code:     1,
			want:     []string{"FAIL " + pkg, "testenv: 1 goroutine(s) leaked", "failed: " + pkg + "\n"},
			lastLine: "1 passed, 0 failed, 0 skipped",
		},
		{
			name: "build failure as plain text and a package fail",
			in: "# " + pkg + " [" + pkg + ".test]\n" +
				"demo/x_test.go:5:28: undefined: undefinedThing\n" +
				stream([]string{
					line("start", "", ""),
					line("output", "", "FAIL\t"+pkg+" [build failed]\n"),
					line("fail", "", ""),
				}),
			code: 1,
			want: []string{
				"demo/x_test.go:5:28: undefined: undefinedThing\n",
				"FAIL " + pkg,
				"failed: " + pkg + "\n",
				"no test ran",
			},
			lastLine: "0 passed, 0 failed, 0 skipped",
		},
		{
			// Verbatim from go1.26 `go test -json` on a package whose test does not compile.
			name: "build failure as build-output events (Go 1.24+)",
			in: `{"ImportPath":"github.com/txkit/txkit/demo [github.com/txkit/txkit/demo.test]","Action":"build-output","Output":"# github.com/txkit/txkit/demo [github.com/txkit/txkit/demo.test]\n"}
{"ImportPath":"github.com/txkit/txkit/demo [github.com/txkit/txkit/demo.test]","Action":"build-output","Output":"demo/x_test.go:5:28: undefined: undefinedThing\n"}
{"ImportPath":"github.com/txkit/txkit/demo [github.com/txkit/txkit/demo.test]","Action":"build-fail"}
{"Time":"2026-11-22T07:50:40.334292739Z","Action":"start","Package":"github.com/txkit/txkit/demo"}
{"Time":"2026-11-22T07:50:40.334409187Z","Action":"output","Package":"github.com/txkit/txkit/demo","Output":"FAIL\tgithub.com/txkit/txkit/demo [build failed]\n"}
{"Time":"2026-11-22T07:50:40.33441621Z","Action":"fail","Package":"github.com/txkit/txkit/demo","Elapsed":0,"FailedBuild":"github.com/txkit/txkit/demo [github.com/txkit/txkit/demo.test]"}
`,
			code: 1,
			want: []string{
				"demo/x_test.go:5:28: undefined: undefinedThing\n",
				"FAIL " + pkg,
				"failed: " + pkg + "\n",
			},
			lastLine: "0 passed, 0 failed, 0 skipped",
		},
		{
			name:     "no input at all",
			in:       "",
			code:     1,
			want:     []string{"no test ran"},
			lastLine: "0 passed, 0 failed, 0 skipped",
		},
		{
			name: "only packages without tests",
			in: stream([]string{
				line("start", "", ""),
				line("output", "", "?   \t"+pkg+"\t[no test files]\n"),
				line("skip", "", ""),
			}),
			code:     1,
			want:     []string{"no test ran"},
			notWant:  []string{"skipped;", "failed:"},
			lastLine: "0 passed, 0 failed, 0 skipped",
		},
		{
			name: "only skipped tests",
			in: stream([]string{
				line("run", "TestIntegrationZK", ""),
				line("output", "TestIntegrationZK", "    zk_test.go:9: TXKIT_ZK is not set (-short)\n"),
				line("skip", "TestIntegrationZK", ""),
				line("pass", "", ""),
			}),
			code:     1,
			want:     []string{"1 test(s) skipped", "TestIntegrationZK: zk_test.go:9: TXKIT_ZK is not set (-short)", "no test ran"},
			lastLine: "0 passed, 0 failed, 1 skipped",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code, err := run(strings.NewReader(tc.in), &out)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			report := out.String()
			if code != tc.code {
				t.Errorf("exit code %d, want %d; report:\n%s", code, tc.code, report)
			}
			for _, w := range tc.want {
				if !strings.Contains(report, w) {
					t.Errorf("report lacks %q; report:\n%s", w, report)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(report, w) {
					t.Errorf("report contains %q; report:\n%s", w, report)
				}
			}
			lines := strings.Split(strings.TrimRight(report, "\n"), "\n")
			if last := lines[len(lines)-1]; last != tc.lastLine {
				t.Errorf("closing line %q, want %q; report:\n%s", last, tc.lastLine, report)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errRead }

var errRead = errors.New("read failed")

func TestRunReadError(t *testing.T) {
	var out strings.Builder
	if _, err := run(failingReader{}, &out); !errors.Is(err, errRead) {
		t.Fatalf("run on a failing reader: error %v, want %v", err, errRead)
	}
}
