package app

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/participant"
)

// Resource is what a participant service keeps: a table with a row per key (a SKU, an account)
// whose amount sits in three columns — free, held and used — and a ledger with a row per op
// applied, which is how the demo proves that no op ran twice. Each op moves the payload's amount
// from one column to another:
//
//	op          moves           refused when
//	try         free → held     free < amount   TCC: reserve stock, freeze funds
//	confirm     held → used                     TCC: sell the reservation, spend the frozen funds
//	cancel      held → free                     TCC: release it
//	action      free → used     free < amount   saga: deduct stock, debit money (no reservation)
//	compensate  used → free                     saga: give it back
//
// No column goes below zero: the table's checks and the update's condition see to it.
type Resource struct {
	Name             string // the service; its table is Name, its ledger Name_ledger
	Key, Amount      string // the payload's fields (and the columns of the key and the amount)
	Free, Held, Used string // the table's amount columns
}

// Stock is the stock service's table: stock(sku, available, reserved, sold), payload {"sku", "qty"}.
func Stock() Resource {
	return Resource{Name: "stock", Key: "sku", Amount: "qty", Free: "available", Held: "reserved", Used: "sold"}
}

// Account is the account service's table: account(account, balance, frozen, spent), payload
// {"account", "amount"}.
func Account() Resource {
	return Resource{Name: "account", Key: "account", Amount: "amount", Free: "balance", Held: "frozen", Used: "spent"}
}

// Ledger returns the name of the resource's ledger table.
func (r Resource) Ledger() string { return r.Name + "_ledger" }

// Payload returns the payload of an op moving n of key.
func (r Resource) Payload(key string, n int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{r.Key: key, r.Amount: n})
	return b
}

// BalancesQuery selects key, free, held and used of every row.
func (r Resource) BalancesQuery() string {
	return fmt.Sprintf(`select %s, %s, %s, %s from %s`, id(r.Key), id(r.Free), id(r.Held), id(r.Used), id(r.Name))
}

// Migrate creates the table and the ledger when they do not exist.
func (r Resource) Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(`
		create table if not exists %[1]s (
			%[2]s text primary key,
			%[3]s bigint not null check (%[3]s >= 0),
			%[4]s bigint not null default 0 check (%[4]s >= 0),
			%[5]s bigint not null default 0 check (%[5]s >= 0));
		create table if not exists %[6]s (
			gid text not null, branch text not null, op text not null,
			%[2]s text not null, %[7]s bigint not null, at timestamptz not null default clock_timestamp())`,
		id(r.Name), id(r.Key), id(r.Free), id(r.Held), id(r.Used), id(r.Ledger()), id(r.Amount)))
	if err != nil {
		return fmt.Errorf("create %s tables: %w", r.Name, err)
	}
	return nil
}

// Seed inserts the rows of initial (key → free amount) whose key is new.
func (r Resource) Seed(ctx context.Context, pool *pgxpool.Pool, initial map[string]int64) error {
	q := fmt.Sprintf(`insert into %s (%s, %s) values ($1, $2) on conflict do nothing`, id(r.Name), id(r.Key), id(r.Free))
	for k, n := range initial {
		if _, err := pool.Exec(ctx, q, k, n); err != nil {
			return fmt.Errorf("seed %s %s: %w", r.Name, k, err)
		}
	}
	return nil
}

// Totals returns the sums of the three amount columns, by column name.
func (r Resource) Totals(ctx context.Context, pool *pgxpool.Pool) (map[string]any, error) {
	var free, held, used int64
	err := pool.QueryRow(ctx, fmt.Sprintf(`select coalesce(sum(%s), 0), coalesce(sum(%s), 0), coalesce(sum(%s), 0) from %s`,
		id(r.Free), id(r.Held), id(r.Used), id(r.Name))).Scan(&free, &held, &used)
	return map[string]any{r.Free: free, r.Held: held, r.Used: used}, err
}

// move returns the columns op moves an amount from and to.
func (r Resource) move(op participant.Op) (from, to string, ok bool) {
	switch op {
	case participant.OpTry:
		return r.Free, r.Held, true
	case participant.OpConfirm:
		return r.Held, r.Used, true
	case participant.OpCancel:
		return r.Held, r.Free, true
	case participant.OpAction:
		return r.Free, r.Used, true
	case participant.OpCompensate:
		return r.Used, r.Free, true
	}
	return "", "", false
}

// Apply applies one op of a branch in tx, the participant's transaction, and writes its ledger
// row. It runs behind the barrier, which has made sure the op is the first of its kind for the
// branch. An op taking from the free amount (try, action) is refused (participant.ErrRefused)
// when too little is free; any other op finding too little is an error, retried by the
// coordinator (with the barrier it cannot happen).
func (r Resource) Apply(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var p map[string]json.RawMessage
	var key string
	var n int64
	if json.Unmarshal(req.Payload, &p) != nil || json.Unmarshal(p[r.Key], &key) != nil || json.Unmarshal(p[r.Amount], &n) != nil {
		return fmt.Errorf("%s payload %s: want {%q, %q > 0}: %w", r.Name, req.Payload, r.Key, r.Amount, participant.ErrBadRequest)
	}
	return r.Move(ctx, tx, req.GID, req.Branch, req.Op, key, n)
}

// Move is [Resource.Apply] with the payload read: op moves n of key for branch of gid (the gRPC
// methods, whose messages carry the key and the amount, call it).
func (r Resource) Move(ctx context.Context, tx pgx.Tx, gid, branch string, op participant.Op, key string, n int64) error {
	if key == "" || n <= 0 {
		return fmt.Errorf("%s: %s %d of %q: want a %s and an %s > 0: %w", r.Name, op, n, key, r.Key, r.Amount, participant.ErrBadRequest)
	}
	from, to, ok := r.move(op)
	if !ok {
		return fmt.Errorf("%s: op %s: %w", r.Name, op, participant.ErrBadRequest)
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`update %[1]s set %[2]s = %[2]s - $2, %[3]s = %[3]s + $2 where %[4]s = $1 and %[2]s >= $2`,
		id(r.Name), id(from), id(to), id(r.Key)), key, n)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		if from == r.Free {
			return fmt.Errorf("%s: %d of %s not available: %w", r.Name, n, key, participant.ErrRefused)
		}
		return fmt.Errorf("%s: %s of %d %s: no such %s, or less than that %s", r.Name, op, n, key, r.Key, from)
	}
	_, err = tx.Exec(ctx, fmt.Sprintf(`insert into %s (gid, branch, op, %s, %s) values ($1, $2, $3, $4, $5)`,
		id(r.Ledger()), id(r.Key), id(r.Amount)), gid, branch, op.String(), key, n)
	return err
}

func id(name string) string { return pgx.Identifier{name}.Sanitize() }
