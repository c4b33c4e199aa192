package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
)

// txCmd runs `txkit tx list|show`: what the tcc and saga coordinators' log holds, for operators.
func txCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var pg pgFlags
	schema, prefix := "", "txkit_"
	register := func(fs *flag.FlagSet) {
		pg.register(fs)
		fs.StringVar(&schema, "schema", schema, "schema of the coordinator's tables")
		fs.StringVar(&prefix, "prefix", prefix, "table prefix")
	}
	verb, vs, rest, err := subcommand("tx", args, register, "list, show")
	if err != nil {
		return err
	}
	var (
		kind, status, after string
		unfinished          bool
		limit               int
	)
	switch verb {
	case "list":
		vs.StringVar(&kind, "kind", "", "tcc, saga, 2pc or 3pc")
		vs.StringVar(&status, "status", "", "only this status")
		vs.BoolVar(&unfinished, "unfinished", false, "only transactions not finished")
		vs.StringVar(&after, "after", "", "gids after this one (paging)")
		vs.IntVar(&limit, "limit", 50, "how many")
	case "show":
	default:
		return usageErr("tx: unknown verb %q", verb)
	}
	if err := parse(vs, rest); err != nil {
		return err
	}
	rest = vs.Args()
	f := core.Filter{After: after, Unfinished: unfinished, Limit: limit}
	switch verb {
	case "list":
		if len(rest) > 0 {
			return usageErr("tx list: unexpected arguments %q", rest)
		}
		if limit < 1 {
			return usageErr("tx list: -limit %d: must be at least 1", limit)
		}
		if kind != "" {
			k, err := core.ParseKind(kind)
			if err != nil {
				return usageErr("tx list: -kind: %v", err)
			}
			f.Kind = k
		}
		if status != "" {
			s, err := core.ParseStatus(status)
			if err != nil {
				return usageErr("tx list: -status: %v", err)
			}
			f.Status = s
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
	opts := []core.LogOption{core.WithTablePrefix(prefix)}
	if schema != "" {
		opts = append(opts, core.WithSchema(schema))
	}
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	log, err := core.New(pool, opts...)
	if err != nil {
		return usageErr("%v", err)
	}
	if verb == "show" {
		t, err := log.Get(ctx, rest[0])
		if err != nil {
			return err
		}
		return showTx(t, stdout)
	}
	txs, err := log.List(ctx, f)
	if err != nil {
		return err
	}
	if len(txs) == 0 {
		_, err := fmt.Fprintln(stdout, "no transactions")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GID\tKIND\tSTATUS\tATTEMPTS\tCREATED\tNEXT_RETRY\tLAST_ERROR")
	for _, t := range txs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(t.GID), t.Kind, t.Status, t.Attempts,
			t.CreatedAt.UTC().Format(time.RFC3339), t.NextRetryAt.UTC().Format(time.RFC3339), oneLine(t.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(txs) == limit {
		_, err := fmt.Fprintf(stdout, "(first %d; -after %s shows the next)\n", limit, printable(txs[len(txs)-1].GID))
		return err
	}
	return nil
}

func showTx(t *core.Transaction, w io.Writer) error {
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
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%d\t%s\n", printable(b.Name), b.Status, b.Target.Kind, oneLine(b.Target.Ref, 60), b.Attempts, oneLine(b.LastError, 80))
	}
	return tw.Flush()
}
