package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/google/uuid"

	"github.com/txkit/txkit/admin"
)

// notifyCmd runs `txkit notify failed|show|redeliver`: the notifications that ran out of attempts,
// one notification with its attempts, and putting failed ones back on the schedule — through the
// admin package (redeliveries are recorded in its audit table).
func notifyCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var pg pgFlags
	schema, table := "", admin.DefaultNotifyTable
	register := func(fs *flag.FlagSet) {
		pg.register(fs)
		fs.StringVar(&schema, "schema", schema, "schema of the notifier's tables")
		fs.StringVar(&table, "table", table, "notifications table")
	}
	verb, vs, rest, err := subcommand("notify", args, register, "failed, show, redeliver")
	if err != nil {
		return err
	}
	limit, reveal := 50, false
	switch verb {
	case "failed":
		vs.IntVar(&limit, "limit", limit, "how many")
	case "show":
		vs.BoolVar(&reveal, "reveal", false, "show the payload (recorded in the audit table)")
	case "redeliver":
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
	case verb == "failed" && (limit < 1 || limit > admin.MaxLimit):
		return usageErr("notify failed: -limit %d: must be 1..%d", limit, admin.MaxLimit)
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
	opts := []admin.Option{admin.WithNotifyTable(table)}
	if schema != "" {
		opts = append(opts, admin.WithSchema(schema))
	}
	a, pool, err := openAdmin(ctx, pgURL, 1, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	switch verb {
	case "failed":
		rs, err := a.FailedNotifications(ctx, limit)
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
		var r *admin.Notification
		payload := ""
		if reveal {
			if err := a.Migrate(ctx); err != nil { // the audit table
				return err
			}
			r, err = a.RevealNotification(ctx, cliActor(getenv), ids[0])
			if r != nil {
				payload = oneLine(string(r.Payload.Value), 200)
			}
		} else {
			r, err = a.Notification(ctx, ids[0])
			if r != nil {
				payload = fmt.Sprintf("%d bytes, sha256 %s (-reveal shows it)", r.Payload.Size, r.Payload.SHA256)
			}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "id\t%s\nreceiver\t%s\nkey\t%s\nstatus\t%s\nattempts\t%d\ncreated\t%s\npayload\t%s\n",
			r.ID, printable(r.Receiver), printable(r.Key), r.Status, r.Attempts, r.CreatedAt.Format("2006-01-02 15:04:05.000"), payload)
		fmt.Fprintln(w, "\nATTEMPT\tAT\tSTATUS\tLATENCY\tERROR")
		for _, a := range r.Tries {
			fmt.Fprintf(w, "%d\t%s\t%d\t%v\t%s\n", a.N, a.At.Format("15:04:05.000"), a.StatusCode, a.Latency.Round(100_000), oneLine(a.Error, 60))
		}
	case "redeliver":
		if err := a.Migrate(ctx); err != nil { // the audit table
			return err
		}
		for _, id := range ids {
			if err := a.Redeliver(ctx, cliActor(getenv), id); err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\tback on the schedule\n", id)
		}
	}
	return nil
}

// cliActor is who the audit table records for a mutating command: "cli:" and the user's name.
func cliActor(getenv func(string) string) string {
	for _, v := range []string{"TXKIT_ACTOR", "USER", "LOGNAME"} {
		if u := getenv(v); u != "" {
			return admin.CLIActorPrefix + u
		}
	}
	return admin.CLIActorPrefix + "unknown"
}
