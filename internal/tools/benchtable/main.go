// Command benchtable reads the output of internal/lockbench's benchmarks (go test -bench) on
// standard input, copies it to standard output, and then prints the comparison table of the lock
// backends in Markdown: one row per backend, one column per figure. `make bench-locks` runs it.
//
//	go test -run '^$' -bench . ./internal/lockbench/ | go run ./internal/tools/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// column is one figure of the table: which benchmark and metric it comes from, and its format.
type column struct {
	title, bench, unit, format string
}

var columns = []column{
	{"acquire+release/s", "Locks/uncontended", "acquires/s", "%.0f"},
	{"round trips/acquire", "Locks/uncontended", "rtt/acquire", "%.1f"},
	{"writes/acquire", "Locks/uncontended", "writes/acquire", "%.1f"},
	{"handoff p50 ms (16)", "Locks/handoff16", "p50-ms", "%.1f"},
	{"handoff p99 ms (16)", "Locks/handoff16", "p99-ms", "%.1f"},
	{"round trips/acquire (16)", "Locks/handoff16", "rtt/acquire", "%.1f"},
	{"wake-ups/acquire (16)", "Locks/handoff16", "wakeups/acquire", "%.1f"},
	{"SIGKILL → next holder ms", "LocksKill", "kill-to-next-ms", "%.0f"},
}

// restart rows are keyed by the server restarted, not by the backend kind.
var restartColumns = []column{
	{"restart ms", "DisruptiveLocksRestart", "restart-ms", "%.0f"},
	{"holder lost (share of runs)", "DisruptiveLocksRestart", "holder-lost", "%.2f"},
	{"stop → holder told ms", "DisruptiveLocksRestart", "lost-learned-ms", "%.0f"},
	{"two holders at once (share of runs)", "DisruptiveLocksRestart", "overlap", "%.2f"},
}

var line = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	figures := map[string]map[string]float64{} // "Locks/uncontended/zk" → unit → value
	var order []string                         // backends and servers in the order they ran
	seen := map[string]bool{}
	sc := bufio.NewScanner(in)
	failed := false
	for sc.Scan() {
		text := sc.Text()
		fmt.Fprintln(out, text)
		if strings.HasPrefix(text, "FAIL") || strings.HasPrefix(text, "--- FAIL") {
			failed = true
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		name := m[1]
		fields := strings.Fields(m[3])
		vals := map[string]float64{}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			vals[fields[i+1]] = v
		}
		figures[name] = vals
		if i := strings.LastIndex(name, "/"); i >= 0 && !seen[name[i+1:]] {
			seen[name[i+1:]] = true
			order = append(order, name[i+1:])
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("a benchmark failed: no table")
	}
	fmt.Fprintln(out)
	table(out, "backend", order, columns, figures)
	fmt.Fprintln(out)
	table(out, "server restarted", order, restartColumns, figures)
	return nil
}

// table prints the rows of keys that have at least one figure in cols.
func table(out io.Writer, head string, keys []string, cols []column, figures map[string]map[string]float64) {
	var rows [][]string
	for _, k := range keys {
		row := []string{k}
		has := false
		for _, c := range cols {
			v, ok := figures[c.bench+"/"+k][c.unit]
			if !ok {
				row = append(row, "—")
				continue
			}
			has = true
			row = append(row, fmt.Sprintf(c.format, v))
		}
		if has {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	titles := []string{head}
	for _, c := range cols {
		titles = append(titles, c.title)
	}
	fmt.Fprintln(out, "| "+strings.Join(titles, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Repeat(" --- |", len(titles)))
	for _, r := range rows {
		fmt.Fprintln(out, "| "+strings.Join(r, " | ")+" |")
	}
}
