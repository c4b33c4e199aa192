package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/outbox"
)

// outboxFlags are the flags of every outbox command.
func outboxFlags(fs *flag.FlagSet, e *env) {
	e.registerPG(fs, "the outbox table")
	fs.StringVar(&e.table, "table", outbox.DefaultTable, "outbox `table`")
}

func requeueFlags(fs *flag.FlagSet, e *env) {
	fs.BoolVar(&e.all, "all", false, "requeue every dead message")
}

// outboxAdmin returns an Admin on the outbox table, connected, and its pool (the caller closes it).
func outboxAdmin(ctx context.Context, e *env) (*admin.Admin, func(), error) {
	if e.table == "" { // admin.Tables would read it as the default
		return nil, nil, usageErr("outbox: -table: empty table name")
	}
	a, pool, err := e.admin(ctx, admin.WithTables(admin.Tables{Outbox: e.table}))
	if err != nil {
		return nil, nil, err
	}
	if err := connect(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return a, pool.Close, nil
}

// outboxBacklog runs `txkit outbox backlog`.
func outboxBacklog(ctx context.Context, e *env) error {
	if err := e.noArgs("outbox backlog"); err != nil {
		return err
	}
	a, done, err := outboxAdmin(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	return backlog(ctx, a, e.stdout)
}

// outboxDead runs `txkit outbox dead`.
func outboxDead(ctx context.Context, e *env) error {
	if err := e.noArgs("outbox dead"); err != nil {
		return err
	}
	if e.limit < 1 {
		return usageErr("outbox dead: -limit %d: must be at least 1", e.limit)
	}
	a, done, err := outboxAdmin(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	return dead(ctx, a, e.limit, e.stdout)
}

// outboxRequeue runs `txkit outbox requeue ID... | -all`.
func outboxRequeue(ctx context.Context, e *env) error {
	if e.all == (len(e.args) > 0) {
		return usageErr("outbox requeue: give message IDs or -all, not both or neither")
	}
	var ids []uuid.UUID
	for _, s := range e.args {
		id, err := uuid.Parse(s)
		if err != nil {
			return usageErr("outbox requeue: %q is not a message ID: %v", s, err)
		}
		ids = append(ids, id)
	}
	a, done, err := outboxAdmin(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	if err := a.Migrate(ctx); err != nil { // the audit table
		return err
	}
	return requeue(ctx, a, cliActor(e.getenv), ids, e.all, e.stdout)
}

func backlog(ctx context.Context, a *admin.Admin, w io.Writer) error {
	s, err := a.Outbox(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", s.Table)
	fmt.Fprintf(tw, "pending\t%d\n", s.Pending)
	fmt.Fprintf(tw, "dead\t%d\n", s.Dead)
	return tw.Flush()
}

func dead(ctx context.Context, a *admin.Admin, limit int, w io.Writer) error {
	list, err := a.DeadMessages(ctx, limit, uuid.Nil)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		_, err := fmt.Fprintf(w, "no dead messages in %s\n", a.OutboxTable())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MSG_ID\tTOPIC\tKEY\tATTEMPTS\tCREATED\tBYTES\tLAST_ERROR")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", d.ID, oneLine(d.Topic, 40), oneLine(d.Key, 40), d.Attempts,
			d.CreatedAt.UTC().Format(time.RFC3339), d.Body.Size, oneLine(d.LastError, 100))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list) == limit {
		_, err := fmt.Fprintf(w, "(first %d; -limit shows more)\n", limit)
		return err
	}
	return nil
}

// requeue requeues the dead messages ids (or all of them) through admin, which records each in
// its audit table. An ID that is not a dead message is counted, not fatal.
func requeue(ctx context.Context, a *admin.Admin, actor string, ids []uuid.UUID, all bool, w io.Writer) error {
	if all {
		n, err := a.RequeueAll(ctx, actor)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "requeued %d dead messages\n", n)
		return err
	}
	var n int
	for _, id := range ids {
		err := a.Requeue(ctx, actor, id)
		switch {
		case err == nil:
			n++
		case errors.Is(err, admin.ErrConflict), errors.Is(err, admin.ErrNotFound):
		default:
			return err
		}
	}
	fmt.Fprintf(w, "requeued %d of %d messages\n", n, len(ids))
	if n < len(ids) {
		return fmt.Errorf("%d of the IDs given are not dead messages in %s", len(ids)-n, a.OutboxTable())
	}
	return nil
}
