package pglock

import (
	"context"
	"fmt"

	"github.com/txkit/txkit/lock"
)

// NewElector returns a candidate with the given id for the election called name: a
// [lock.Election] on a lease [Mutex] whose row carries the id as its data, so that
// [lock.Election.Leader] reads who leads from the live (unexpired) row. Ids need not be unique,
// but an id per process makes that answer useful. opts configure the Election (such as
// lock.WithElectionRegisterer). It does not touch the database. An empty id or a bad name returns
// an error wrapping [lock.ErrInvalidOption].
func (c *Client) NewElector(name, id string, opts ...lock.ElectionOption) (*lock.Election, error) {
	if id == "" {
		return nil, fmt.Errorf("pglock: elector on %s: empty candidate id: %w", name, lock.ErrInvalidOption)
	}
	m, err := c.NewMutex(name, WithData(id))
	if err != nil {
		return nil, err
	}
	return lock.NewElection(m, name, id, func(ctx context.Context) (string, error) { return c.holder(ctx, name) },
		nil, c.log, opts...)
}

// holder returns the data of name's live row, or an error wrapping [lock.ErrNoLeader].
func (c *Client) holder(ctx context.Context, name string) (string, error) {
	cs, _, err := inspector{c: c}.Contenders(ctx, name)
	switch {
	case err != nil:
		return "", err
	case len(cs) == 0:
		return "", fmt.Errorf("pglock: election %s: %w", name, lock.ErrNoLeader)
	}
	return cs[0].ID, nil
}
