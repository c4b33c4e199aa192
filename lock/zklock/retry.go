package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// retryPause is how long a recipe waits before it repeats a request whose outcome a lost
// connection left unknown.
const retryPause = 50 * time.Millisecond

// retryable reports whether a ZooKeeper error means the request's outcome is unknown and it may
// be repeated once the connection is back.
func retryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer)
}

// retry decides what a recipe does after a request of e failed with err. While the session lives
// and err is [retryable], it pauses and returns nil: the caller repeats the request. Otherwise it
// returns the error that ends the caller's attempt: "zklock: <what>: " wrapping the session's end
// once the session is over, ctx's error (unwrapped) once ctx has ended, and err in any other case.
func (e *epoch) retry(ctx context.Context, err error, what string) error {
	switch {
	case e.isDone():
		return fmt.Errorf("zklock: %s: %w", what, e.Err())
	case ctx.Err() != nil:
		return ctx.Err()
	case retryable(err):
		return pause(ctx, nil, retryPause)
	default:
		return fmt.Errorf("zklock: %s: %w", what, err)
	}
}

// pause waits for d. It returns nil when d has passed or done closes (a nil done never does), and
// ctx's error when ctx ends first.
func pause(ctx context.Context, done <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return nil
	case <-t.C:
		return nil
	}
}
