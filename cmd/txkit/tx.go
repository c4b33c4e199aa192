package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txkit/txkit/admin"
)

// txCmd runs `txkit tx list|show`: what the coordinators' logs hold, for operators, through the
// admin package's queries (the API and the console use the same ones).
func txCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var pg pgFlags
	schema, prefix := "", ""
	register := func(fs *flag.FlagSet) {
		pg.register(fs)
		fs.StringVar(&schema, "schema", schema, "schema of the coordinator's tables")
		fs.StringVar(&prefix, "prefix", prefix, "table prefix (default: the four coordinators' logs)")
	}
	verb, vs, rest, err := subcommand("tx", args, register, "list, show")
	if err != nil {
		return err
	}
	var (
		f     admin.TxFilter
		limit int
	)
	switch verb {
	case "list":
		vs.StringVar(&f.Kind, "kind", "", "tcc, saga, 2pc or 3pc")
		vs.StringVar(&f.Status, "status", "", "only this status")
		vs.BoolVar(&f.Unfinished, "unfinished", false, "only transactions not finished")
		vs.DurationVar(&f.OlderThan, "older-than", 0, "only transactions created longer ago than this")
		vs.StringVar(&f.After, "after", "", "gids after this one (paging)")
		vs.IntVar(&limit, "limit", 50, "how many")
	case "show":
	default:
		return usageErr("tx: unknown verb %q", verb)
	}
	if err := parse(vs, rest); err != nil {
		return err
	}
	rest = vs.Args()
	switch verb {
	case "list":
		if len(rest) > 0 {
			return usageErr("tx list: unexpected arguments %q", rest)
		}
		if limit < 1 {
			return usageErr("tx list: -limit %d: must be at least 1", limit)
		}
		f.Limit = limit
		if err := f.Check(); err != nil {
			return usageErr("tx list: -%s", strings.ReplaceAll(err.Error(), "admin: ", ""))
		}
	case "show":
		if len(rest) != 1 {
			return usageErr("tx show: give one gid")
		}
	}
	pgURL, err := pg.resolve(getenv)
	if err != nil {
		return err
	}
	opts := []admin.Option{}
	if prefix != "" {
		opts = append(opts, admin.WithLogs(logOf(prefix)))
	}
	if schema != "" {
		opts = append(opts, admin.WithSchema(schema))
	}
	a, pool, err := openAdmin(ctx, pgURL, 1, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	if verb == "show" {
		t, err := a.Transaction(ctx, rest[0])
		if err != nil {
			return err
		}
		return showTx(t, stdout)
	}
	page, err := a.Transactions(ctx, f)
	if errors.Is(err, admin.ErrBadRequest) {
		return usageErr("tx list: %v", err)
	}
	if err != nil {
		return err
	}
	if len(page.Items) == 0 {
		_, err := fmt.Fprintln(stdout, "no transactions")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GID\tKIND\tSTATUS\tATTEMPTS\tCREATED\tNEXT_RETRY\tLAST_ERROR")
	for _, t := range page.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(t.GID), t.Kind, t.Status, t.Attempts,
			t.CreatedAt.UTC().Format(time.RFC3339), t.NextRetryAt.UTC().Format(time.RFC3339), oneLine(t.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		_, err := fmt.Fprintf(stdout, "(first %d; -after %s shows the next)\n", limit, printable(page.Next))
		return err
	}
	return nil
}

// logOf is the log of the tables with prefix: named as the standard log with that prefix, or
// after the prefix.
func logOf(prefix string) admin.LogSource {
	for _, l := range admin.StandardLogs() {
		if l.Prefix == prefix {
			return l
		}
	}
	return admin.LogSource{Name: prefix, Prefix: prefix}
}

func showTx(t *admin.Transaction, w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "gid\t%s\n", printable(t.GID))
	fmt.Fprintf(tw, "kind\t%s\n", t.Kind)
	fmt.Fprintf(tw, "status\t%s\n", t.Status)
	fmt.Fprintf(tw, "created\t%s\n", t.CreatedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "timeout\t%s\n", t.TimeoutAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "next retry\t%s\n", t.NextRetryAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "attempts\t%d\n", t.Attempts)
	fmt.Fprintf(tw, "last error\t%s\n", oneLine(t.LastError, 200))
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nBRANCH\tSTATUS\tTARGET\tATTEMPTS\tLAST_ERROR")
	for _, b := range t.Branches {
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%d\t%s\n", printable(b.Name), b.Status, b.TargetKind, oneLine(b.Target, 60), b.Attempts, oneLine(b.LastError, 80))
	}
	return tw.Flush()
}
