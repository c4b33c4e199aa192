package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/txkit/txkit/admin"
)

// auditCmd runs `txkit audit purge -older-than D`: one pass of admin's audit retention
// (admin.Admin.PurgeAudit), for a table that no `txkit serve` purges.
func auditCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var pg pgFlags
	schema, table := "", admin.DefaultAuditTable
	olderThan := admin.DefaultAuditRetention
	register := func(fs *flag.FlagSet) {
		pg.register(fs)
		fs.StringVar(&schema, "schema", schema, "schema of the audit table")
		fs.StringVar(&table, "table", table, "audit table")
		fs.DurationVar(&olderThan, "older-than", olderThan, "delete the rows older than this")
	}
	verb, vs, rest, err := subcommand("audit", args, register, "purge")
	if err != nil {
		return err
	}
	if verb != "purge" {
		return usageErr("audit: unknown verb %q", verb)
	}
	if err := parse(vs, rest); err != nil {
		return err
	}
	if vs.NArg() > 0 {
		return usageErr("audit purge: unexpected arguments %q", vs.Args())
	}
	if olderThan <= admin.DefaultHMACWindow {
		return usageErr("audit purge: -older-than %v: must be longer than the HMAC window %v (signed requests' nonces)", olderThan, admin.DefaultHMACWindow)
	}
	pgURL, err := pg.resolve(getenv)
	if err != nil {
		return err
	}
	opts := []admin.Option{admin.WithAuditTable(table)}
	if schema != "" {
		opts = append(opts, admin.WithSchema(schema))
	}
	a, pool, err := openAdmin(ctx, pgURL, 1, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := connect(ctx, pool); err != nil {
		return err
	}
	n, err := a.PurgeAudit(ctx, olderThan)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "purged %d audit rows older than %v\n", n, olderThan)
	return err
}
