package saga

import (
	"fmt"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
)

// options are saga's own settings; the shared ones are those of package coordinator.
type options struct {
	attempts int
}

// Validate is called by New once every option is applied.
func (o *options) Validate(core.Config) error {
	if o.attempts <= 0 {
		return fmt.Errorf("attempts %d: %w", o.attempts, coordinator.ErrInvalidOption)
	}
	return nil
}

// WithAttempts sets how many times [Saga.Submit] calls an action or compensation that fails
// transiently (any error but a refusal) before it records the failure and leaves the saga to the
// leader, which retries it with backoff (default 3). The leader calls once per drive. Below 1 is
// an error wrapping [coordinator.ErrInvalidOption]; given to another coordinator's New, too.
func WithAttempts(n int) coordinator.Option {
	return core.OwnOption("saga.WithAttempts", func(o *options) { o.attempts = n })
}
