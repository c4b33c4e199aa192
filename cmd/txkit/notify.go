package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/notify"
)

// notifyCmd runs `txkit notify failed|show|redeliver`: the notifications that ran out of attempts,
// one notification with its attempts, and putting failed ones back on the schedule.
func notifyCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var pg pgFlags
	schema, table := "", "txkit_notify"
	register := func(fs *flag.FlagSet) {
		pg.register(fs)
		fs.StringVar(&schema, "schema", schema, "schema of the notifier's tables")
		fs.StringVar(&table, "table", table, "notifications table")
	}
	verb, vs, rest, err := subcommand("notify", args, register, "failed, show, redeliver")
	if err != nil {
		return err
	}
	limit := 50
	switch verb {
	case "failed":
		vs.IntVar(&limit, "limit", limit, "how many")
	case "show", "redeliver":
	default:
		return usageErr("notify: unknown verb %q", verb)
	}
	if err := parse(vs, rest); err != nil {
		return err
	}
	rest = vs.Args()
	var ids []uuid.UUID
	switch {
	case verb == "failed" && len(rest) > 0:
		return usageErr("notify failed: unexpected arguments %q", rest)
	case verb == "failed" && limit < 1:
		return usageErr("notify failed: -limit %d: must be at least 1", limit)
	case verb == "show" && len(rest) != 1, verb == "redeliver" && len(rest) == 0:
		return usageErr("notify %s: give notification ids (show: one)", verb)
	}
	for _, a := range rest {
		id, err := uuid.Parse(a)
		if err != nil {
			return usageErr("notify %s: %q is not a notification id: %v", verb, a, err)
		}
		ids = append(ids, id)
	}
	pgURL, err := pg.resolve(getenv)
	if err != nil {
		return err
	}
	opts := []notify.Option{notify.WithTable(table)}
	if schema != "" {
		opts = append(opts, notify.WithSchema(schema))
	}
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	n, err := notify.New(pool, nil, opts...) // operator calls need no receiver
	if err != nil {
		return usageErr("%v", err)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	switch verb {
	case "failed":
		rs, err := n.ListFailed(ctx, limit)
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			fmt.Fprintln(w, "no failed notifications")
			return nil
		}
		fmt.Fprintln(w, "ID\tRECEIVER\tKEY\tATTEMPTS\tLAST STATUS\tLAST ERROR")
		for _, r := range rs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, printable(r.Receiver), printable(r.Key), r.Attempts, r.LastStatusCode, oneLine(r.LastError, 60))
		}
	case "show":
		r, err := n.Get(ctx, ids[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "id\t%s\nreceiver\t%s\nkey\t%s\nstatus\t%s\nattempts\t%d\ncreated\t%s\npayload\t%s\n",
			r.ID, printable(r.Receiver), printable(r.Key), r.Status, r.Attempts, r.CreatedAt.Format("2006-01-02 15:04:05.000"), oneLine(string(r.Payload), 200))
		as, err := n.Attempts(ctx, r.ID)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "\nATTEMPT\tAT\tSTATUS\tLATENCY\tERROR")
		for _, a := range as {
			fmt.Fprintf(w, "%d\t%s\t%d\t%v\t%s\n", a.N, a.At.Format("15:04:05.000"), a.StatusCode, a.Latency.Round(100_000), oneLine(a.Error, 60))
		}
	case "redeliver":
		for _, id := range ids {
			if err := n.Redeliver(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\tback on the schedule\n", id)
		}
	}
	return nil
}
