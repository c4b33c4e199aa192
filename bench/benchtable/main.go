// Command benchtable reads benchmark output (go test -bench) on standard input, copies it to
// standard output, and then prints in Markdown the tables it has figures for:
//
//   - the comparison of the lock backends (bench/lockbench's benchmarks): one row per backend,
//     one column per figure; `make bench-locks` runs it;
//
//   - the recipes at concurrency (bench/concbench's BenchmarkConcurrency): one row per recipe
//     and client count — txkit/s, bare/s, ratio, p50 and p99 ms, PostgreSQL commits per operation
//     (txkit / bare), pgbench's ceiling for the same writes, the processor time per operation of
//     the benchmark's process (Go), PostgreSQL's processes and the JVMs (txkit / bare), and the
//     share of the machine's CPUs busy meanwhile; `make bench-concurrency` and `make bench` run it.
//
//     go test -run '^$' -bench . ./bench/lockbench/ | go run ./bench/benchtable
//     go test -run '^$' -bench Concurrency -benchtime 3x ./bench/concbench/ | go run ./bench/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
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

// concurrency matches a BenchmarkConcurrency row's name: the recipe and the client count.
var concurrency = regexp.MustCompile(`^Concurrency/([^/]+)/clients=(\d+)$`)

// concColumn is a figure of a concurrency table: its title, the metric's unit, and the unit of the
// metric printed after it ("txkit / bare"), if any.
type concColumn struct{ title, unit, pair, format string }

// concColumns are the concurrency table's figures after the recipe and clients columns; a pair
// of units is printed "txkit / bare".
var concColumns = []concColumn{
	{"txkit/s", "txkit/s", "", "%.0f"},
	{"bare/s", "bare/s", "", "%.0f"},
	{"ratio", "ratio", "", "%.2f"},
	{"p50 ms", "p50-ms", "", "%.1f"},
	{"p99 ms", "p99-ms", "", "%.1f"},
	{"PG commits/op (txkit / bare)", "pg-commits/op", "bare-pg-commits/op", "%.1f"},
	{"PG ceiling/s (pgbench)", "pg-ceiling/s", "", "%.0f"},
	{"CPU ms/op: Go (txkit / bare)", "go-cpu-ms/op", "bare-go-cpu-ms/op", "%.2f"},
	{"CPU ms/op: PostgreSQL", "pg-cpu-ms/op", "bare-pg-cpu-ms/op", "%.2f"},
	{"CPU ms/op: JVMs", "jvm-cpu-ms/op", "bare-jvm-cpu-ms/op", "%.2f"},
	{"machine busy", "busy", "bare-busy", "%.2f"},
}

// floorColumns are the floor table's figures (TXKIT_CONCBENCH_FLOOR=1: bench/concbench's floor
// side, bare plus the writes txkit's guarantees need, by hand), for the rows that have them.
var floorColumns = []concColumn{
	{"txkit/s", "txkit/s", "", "%.0f"},
	{"bare/s", "bare/s", "", "%.0f"},
	{"floor/s", "floor/s", "", "%.0f"},
	{"txkit/bare", "ratio", "", "%.2f"},
	{"floor/bare", "floor-ratio", "", "%.2f"},
	{"txkit/floor", "txkit/floor", "", "%.2f"},
	{"PG commits/op (txkit / floor)", "pg-commits/op", "floor-pg-commits/op", "%.1f"},
	{"CPU ms/op: Go (txkit / floor)", "go-cpu-ms/op", "floor-go-cpu-ms/op", "%.2f"},
	{"CPU ms/op: PostgreSQL (txkit / floor)", "pg-cpu-ms/op", "floor-pg-cpu-ms/op", "%.2f"},
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	figures := map[string]map[string]float64{} // "Locks/uncontended/zk" → unit → value
	var order []string                         // backends and servers in the order they ran
	var concRows []string                      // BenchmarkConcurrency rows in the order they ran
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
		if concurrency.MatchString(name) {
			concRows = append(concRows, name)
			continue
		}
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
	table(out, "backend", order, columns, figures)
	table(out, "server restarted", order, restartColumns, figures)
	concTable(out, concRows, figures, concColumns, "")
	concTable(out, concRows, figures, floorColumns, "floor/s")
	return nil
}

// concTable prints a concurrency table of cols: one row per recipe and client count that has the
// figure need ("": every row), "—" for a figure the row lacks; nothing when no row has need.
func concTable(out io.Writer, rows []string, figures map[string]map[string]float64, cols []concColumn, need string) {
	if need != "" {
		rows = slices.DeleteFunc(slices.Clone(rows), func(name string) bool { _, ok := figures[name][need]; return !ok })
	}
	if len(rows) == 0 {
		return
	}
	titles := []string{"recipe", "clients"}
	for _, c := range cols {
		titles = append(titles, c.title)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| "+strings.Join(titles, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Repeat(" --- |", len(titles)))
	for _, name := range rows {
		m := concurrency.FindStringSubmatch(name)
		vals := figures[name]
		row := []string{m[1], m[2]}
		for _, c := range cols {
			cell := "—"
			if v, ok := vals[c.unit]; ok {
				cell = fmt.Sprintf(c.format, v)
			}
			if c.pair != "" {
				p := "—"
				if v, ok := vals[c.pair]; ok {
					p = fmt.Sprintf(c.format, v)
				}
				cell += " / " + p
			}
			row = append(row, cell)
		}
		fmt.Fprintln(out, "| "+strings.Join(row, " | ")+" |")
	}
}

// table prints the rows of keys that have at least one figure in cols, after an empty line;
// nothing when no key has one.
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
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| "+strings.Join(titles, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Repeat(" --- |", len(titles)))
	for _, r := range rows {
		fmt.Fprintln(out, "| "+strings.Join(r, " | ")+" |")
	}
}
