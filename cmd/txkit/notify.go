package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/google/uuid"

	"github.com/txkit/txkit/admin"
)

// notifyFlags are the flags of every notify command: the notifications that ran out of attempts,
// one notification with its attempts, and putting failed ones back on the schedule — through the
// admin package (redeliveries and reveals are recorded in its audit table).
func notifyFlags(fs *flag.FlagSet, e *env) {
	e.registerPG(fs, "the notifier's tables")
	fs.StringVar(&e.table, "table", admin.DefaultNotifyTable, "notifications `table`")
}

func revealFlag(fs *flag.FlagSet, e *env) {
	fs.BoolVar(&e.reveal, "reveal", false, "show the payload (recorded in the audit table)")
}

// notifyAdmin checks the notification ids given (show: one, redeliver: one or more) and returns
// them with an Admin on the notifications table and its pool (the caller closes it).
func notifyAdmin(ctx context.Context, e *env, verb string) ([]uuid.UUID, *admin.Admin, func(), error) {
	if (verb == "show" && len(e.args) != 1) || (verb == "redeliver" && len(e.args) == 0) {
		return nil, nil, nil, usageErr("notify %s: give notification ids (show: one)", verb)
	}
	var ids []uuid.UUID
	for _, s := range e.args {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, nil, nil, usageErr("notify %s: %q is not a notification id: %v", verb, s, err)
		}
		ids = append(ids, id)
	}
	if e.table == "" { // admin.Tables would read it as the default
		return nil, nil, nil, usageErr("notify %s: -table: empty table name", verb)
	}
	a, pool, err := e.admin(ctx, admin.WithTables(admin.Tables{Notify: e.table}))
	if err != nil {
		return nil, nil, nil, err
	}
	return ids, a, pool.Close, nil
}

// notifyFailed runs `txkit notify failed`.
func notifyFailed(ctx context.Context, e *env) error {
	if err := e.noArgs("notify failed"); err != nil {
		return err
	}
	if e.limit < 1 || e.limit > admin.MaxLimit {
		return usageErr("notify failed: -limit %d: must be 1..%d", e.limit, admin.MaxLimit)
	}
	_, a, done, err := notifyAdmin(ctx, e, "failed")
	if err != nil {
		return err
	}
	defer done()
	rs, err := a.FailedNotifications(ctx, e.limit)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	if len(rs) == 0 {
		fmt.Fprintln(w, "no failed notifications")
		return nil
	}
	fmt.Fprintln(w, "ID\tRECEIVER\tKEY\tATTEMPTS\tLAST STATUS\tLAST ERROR")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, printable(r.Receiver), printable(r.Key), r.Attempts, r.LastStatusCode, oneLine(r.LastError, 60))
	}
	return nil
}

// notifyShow runs `txkit notify show ID`: the payload is redacted unless -reveal, which the audit
// table records.
func notifyShow(ctx context.Context, e *env) error {
	ids, a, done, err := notifyAdmin(ctx, e, "show")
	if err != nil {
		return err
	}
	defer done()
	var r *admin.Notification
	payload := ""
	if e.reveal {
		if err := a.Migrate(ctx); err != nil { // the audit table
			return err
		}
		r, err = a.RevealNotification(ctx, cliActor(e.getenv), ids[0])
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
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	fmt.Fprintf(w, "id\t%s\nreceiver\t%s\nkey\t%s\nstatus\t%s\nattempts\t%d\ncreated\t%s\npayload\t%s\n",
		r.ID, printable(r.Receiver), printable(r.Key), r.Status, r.Attempts, r.CreatedAt.Format("2006-01-02 15:04:05.000"), payload)
	fmt.Fprintln(w, "\nATTEMPT\tAT\tSTATUS\tLATENCY\tERROR")
	for _, a := range r.Tries {
		fmt.Fprintf(w, "%d\t%s\t%d\t%v\t%s\n", a.N, a.At.Format("15:04:05.000"), a.StatusCode, a.Latency.Round(100_000), oneLine(a.Error, 60))
	}
	return nil
}

// notifyRedeliver runs `txkit notify redeliver ID...`.
func notifyRedeliver(ctx context.Context, e *env) error {
	ids, a, done, err := notifyAdmin(ctx, e, "redeliver")
	if err != nil {
		return err
	}
	defer done()
	if err := a.Migrate(ctx); err != nil { // the audit table
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	for _, id := range ids {
		if err := a.Redeliver(ctx, cliActor(e.getenv), id); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\tback on the schedule\n", id)
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
