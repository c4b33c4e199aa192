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

// txFlags are the flags of every tx command: which log, through the admin package's queries (the
// API and the console use the same ones).
func txFlags(fs *flag.FlagSet, e *env) {
	e.registerPG(fs, "the coordinator's tables")
	fs.StringVar(&e.prefix, "prefix", "", "table `prefix` of one log (default: all five, tcc txkit_, saga txkit_saga_,\n"+
		"two-phase commit txkit_2pc_, three-phase commit txkit_3pc_, workflow txkit_workflow_)")
	registerShards(fs, e)
}

func txListFlags(fs *flag.FlagSet, e *env) {
	fs.StringVar(&e.filter.Kind, "kind", "", "only this `kind`: tcc, saga, 2pc, 3pc or workflow")
	fs.StringVar(&e.filter.Status, "status", "", "only this `status`")
	fs.BoolVar(&e.filter.Unfinished, "unfinished", false, "only transactions not finished")
	fs.DurationVar(&e.filter.OlderThan, "older-than", 0, "only transactions created longer ago than `D`")
	fs.StringVar(&e.filter.After, "after", "", "the gids after `GID` (paging)")
	fs.IntVar(&e.limit, "limit", 50, "list at most `N` transactions")
}

// txAdmin returns an Admin on the log of -prefix (or all five) and its pool (the caller closes it).
func txAdmin(ctx context.Context, e *env) (*admin.Admin, func(), error) {
	var opts []admin.Option
	logs := admin.StandardLogs()
	if e.prefix != "" {
		logs = []admin.LogSource{logOf(e.prefix)}
	}
	logs, closeShards, err := e.shardLogs(ctx, logs, 1)
	if err != nil {
		return nil, nil, err
	}
	if e.prefix != "" || len(e.shards) > 0 {
		opts = append(opts, admin.WithTables(admin.Tables{Logs: logs}))
	}
	a, pool, err := e.admin(ctx, opts...)
	if err != nil {
		closeShards()
		return nil, nil, err
	}
	return a, func() { pool.Close(); closeShards() }, nil
}

// txList runs `txkit tx list`.
func txList(ctx context.Context, e *env) error {
	if err := e.noArgs("tx list"); err != nil {
		return err
	}
	if e.limit < 1 {
		return usageErr("tx list: -limit %d: must be at least 1", e.limit)
	}
	f := e.filter
	f.Limit = e.limit
	if err := f.Check(); err != nil {
		return usageErr("tx list: -%s", strings.ReplaceAll(err.Error(), "admin: ", ""))
	}
	a, done, err := txAdmin(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	page, err := a.Transactions(ctx, f)
	if errors.Is(err, admin.ErrBadRequest) {
		return usageErr("tx list: %v", err)
	}
	if err != nil {
		return err
	}
	if len(page.Items) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no transactions")
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GID\tKIND\tSTATUS\tATTEMPTS\tCREATED\tNEXT_RETRY\tLAST_ERROR")
	for _, t := range page.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(t.GID), kindOf(&t), statusOf(&t), t.Attempts,
			t.CreatedAt.UTC().Format(time.RFC3339), timeOrDash(t.NextRetryAt, time.RFC3339), oneLine(t.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		_, err := fmt.Fprintf(e.stdout, "(first %d; -after %s shows the next)\n", e.limit, printable(page.Next))
		return err
	}
	return nil
}

// txShow runs `txkit tx show GID`: payloads (a workflow step's result) are redacted unless
// -reveal, which the audit table records.
func txShow(ctx context.Context, e *env) error {
	if len(e.args) != 1 {
		return usageErr("tx show: give one gid")
	}
	a, done, err := txAdmin(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	var t *admin.Transaction
	if e.reveal {
		if err := a.Migrate(ctx); err != nil { // the audit table
			return err
		}
		t, err = a.RevealTransaction(ctx, cliActor(e.getenv), e.args[0])
	} else {
		t, err = a.Transaction(ctx, e.args[0])
	}
	if err != nil {
		return err
	}
	return showTx(t, e.stdout)
}

// txResume runs `txkit tx resume GID`.
func txResume(ctx context.Context, e *env) error {
	if len(e.args) != 1 {
		return usageErr("tx resume: give one gid")
	}
	a, done, err := txAdmin(ctx, e)
	if err != nil {
		return err
	}
	defer done()
	if err := a.Migrate(ctx); err != nil { // the audit table
		return err
	}
	if err := a.Resume(ctx, cliActor(e.getenv), e.args[0]); err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\trunning again: the leader replays it now\n", printable(e.args[0]))
	return err
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
	fmt.Fprintf(tw, "kind\t%s\n", kindOf(t))
	fmt.Fprintf(tw, "status\t%s\n", statusOf(t))
	if !t.SleepingUntil.IsZero() {
		fmt.Fprintf(tw, "sleeping until\t%s\n", t.SleepingUntil.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "created\t%s\n", t.CreatedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "timeout\t%s\n", t.TimeoutAt.UTC().Format(time.RFC3339Nano))
	if !t.NextRetryAt.IsZero() {
		fmt.Fprintf(tw, "next retry\t%s\n", t.NextRetryAt.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "attempts\t%d\n", t.Attempts)
	fmt.Fprintf(tw, "last error\t%s\n", oneLine(t.LastError, 200))
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nBRANCH\tSTATUS\tTARGET\tATTEMPTS\tLAST_ERROR\tPAYLOAD")
	for _, b := range t.Branches {
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%d\t%s\t%s\n", printable(b.Name), b.Status, b.TargetKind, oneLine(b.Target, 60), b.Attempts,
			oneLine(b.LastError, 80), secretText(b.Payload))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range t.Branches {
		if b.Refusal == "" {
			continue
		}
		// A workflow's own records: a local step's error, and why the workflow rolled back.
		what := "refused by " + printable(b.Name)
		if b.TargetKind == "local" {
			what = "error of " + printable(b.Name)
		}
		if _, err := fmt.Fprintf(w, "\n%s: %s\n", what, oneLine(b.Refusal, 500)); err != nil {
			return err
		}
	}
	return nil
}

// secretText is a payload as tx show prints it: its value when revealed, its size otherwise.
func secretText(s *admin.Secret) string {
	switch {
	case s == nil:
		return "-"
	case s.Value != nil:
		return oneLine(string(s.Value), 60)
	}
	return fmt.Sprintf("(%d bytes)", s.Size)
}

// kindOf is t's kind, with a workflow's name ("workflow order").
func kindOf(t *admin.Transaction) string {
	if t.Workflow != "" {
		return t.Kind + " " + printable(t.Workflow)
	}
	return t.Kind
}

// statusOf is t's status, with why it rolled back when the log knows ("cancelled (refused)").
func statusOf(t *admin.Transaction) string {
	switch t.AbortCause {
	case admin.CauseRefused:
		return t.Status + " (refused)"
	case admin.CauseTimeout:
		return t.Status + " (timed out)"
	}
	if t.Status == "stopped" {
		return t.Status + " (for an operator: txkit tx resume)"
	}
	return t.Status
}

// timeOrDash formats t, or "-" for the zero time.
func timeOrDash(t time.Time, layout string) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(layout)
}
