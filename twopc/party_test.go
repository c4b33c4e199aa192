package twopc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// httpParty is a 2PC participant over HTTP that is not a database of the coordinator's: a points
// service whose prepare holds the points as pending, commit applies them and abort drops them,
// each behind the barrier.
type httpParty struct {
	url  string
	pool *pgxpool.Pool
}

func newHTTPParty(t *testing.T, pool *pgxpool.Pool) *httpParty {
	t.Helper()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `create table points_pending (gid text primary key, n int not null);
		create table points (id int primary key, n int not null); insert into points values (1, 0)`); err != nil {
		t.Fatal(err)
	}
	// The tests post to it with participant.HTTP{URL: p.url} and no client, so unsigned: this
	// party opts out of signing (participant's own tests cover signed calls).
	bar, err := barrier.New(pool, barrier.WithUnsignedRequests())
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	h := bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		switch req.Op {
		case participant.OpPrepare:
			var p struct{ N int }
			if err := json.Unmarshal(req.Payload, &p); err != nil {
				return fmt.Errorf("payload: %w: %w", err, participant.ErrBadRequest)
			}
			_, err := tx.Exec(ctx, `insert into points_pending values ($1, $2)`, req.GID, p.N)
			return err
		case participant.OpCommit:
			_, err := tx.Exec(ctx, `with p as (delete from points_pending where gid = $1 returning n)
				update points set n = points.n + p.n from p where id = 1`, req.GID)
			return err
		case participant.OpAbort:
			_, err := tx.Exec(ctx, `delete from points_pending where gid = $1`, req.GID)
			return err
		}
		return fmt.Errorf("op %s: %w", req.Op, participant.ErrBadRequest)
	}, barrier.WithAllowedOps(participant.OpPrepare, participant.OpCommit, participant.OpAbort))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &httpParty{url: srv.URL, pool: pool}
}

func (p *httpParty) applied(t *testing.T) int {
	var n int
	if err := p.pool.QueryRow(t.Context(), `select n from points where id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (p *httpParty) pending(t *testing.T) int {
	var n int
	if err := p.pool.QueryRow(t.Context(), `select coalesce(sum(n), 0) from points_pending`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
