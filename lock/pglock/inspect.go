package pglock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/lock"
)

// Inspector returns the [lock.Inspector] of the Client's lease locks and elections ([Mutex],
// [Client.NewElector]), by lock name. Contenders reads the name's row in one statement: the holder
// of a row that has not expired, with the row's data as ID (the candidate id of an election) and
// its token; Since is the zero time (the table does not record when a row was taken). Waiters
// queue inside their own processes, so waitersKnown is always false and only the holder is listed. [AdvisoryMutex] holds are not covered (they have no row), nor are
// [Mutex.Do]'s (its row looks free while its transaction holds it). A bad name
// returns an error wrapping [lock.ErrInvalidOption]; ctx bounds the statement. It works on a
// closed Client too (it needs only the pool), and is safe for concurrent use.
func (c *Client) Inspector() lock.Inspector { return inspector{c: c} }

type inspector struct{ c *Client }

func (i inspector) Contenders(ctx context.Context, name string) ([]lock.Contender, bool, error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	var data string
	var tok int64
	switch err := i.c.pool.QueryRow(ctx, i.c.holderOf, name).Scan(&data, &tok); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("pglock: contenders of %s: %w", name, err)
	}
	return []lock.Contender{{ID: data, Token: lock.Token{Seq: tok}, Holder: true}}, false, nil
}
