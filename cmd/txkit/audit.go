package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/txkit/txkit/admin"
)

// auditFlags are the flags of `txkit audit purge -older-than D`: one pass of admin's audit
// retention (admin.Admin.PurgeAudit), for a table that no `txkit serve` purges.
func auditFlags(fs *flag.FlagSet, e *env) {
	e.registerPG(fs, "the audit table")
	fs.StringVar(&e.table, "table", admin.DefaultAuditTable, "audit `table`")
	fs.DurationVar(&e.olderThan, "older-than", admin.DefaultAuditRetention, "delete the rows older than `D`")
}

// auditPurge runs `txkit audit purge`.
func auditPurge(ctx context.Context, e *env) error {
	if err := e.noArgs("audit purge"); err != nil {
		return err
	}
	if e.olderThan <= admin.DefaultHMACWindow {
		return usageErr("audit purge: -older-than %v: must be longer than the HMAC window %v (signed requests' nonces)", e.olderThan, admin.DefaultHMACWindow)
	}
	if e.table == "" { // admin.Tables would read it as the default
		return usageErr("audit purge: -table: empty table name")
	}
	a, pool, err := e.admin(ctx, admin.WithTables(admin.Tables{Audit: e.table}))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := connect(ctx, pool); err != nil {
		return err
	}
	n, err := a.PurgeAudit(ctx, e.olderThan)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "purged %d audit rows older than %v\n", n, e.olderThan)
	return err
}
