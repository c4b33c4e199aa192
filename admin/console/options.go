package console

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/txkit/txkit/internal/obs"
)

// Option configures [Handler].
type Option func(*options)

type options struct {
	refresh time.Duration
	log     *slog.Logger
}

func defaultOptions() options {
	return options{refresh: 5 * time.Second, log: slog.New(slog.DiscardHandler)}
}

// consoleTitle is the name shown in every page's header and title.
const consoleTitle = "txkit console"

// WithRefresh sets how often a page reloads itself (a small timer in the page's script, which the
// operator can switch off and which waits while an action is under way); 0 turns it off. Default
// 5 s; a value between 0 and 1 s, or below 0, is refused.
func WithRefresh(d time.Duration) Option { return func(o *options) { o.refresh = d } }

// WithLogger sets the logger for the errors a page hides from the browser (logged with the request
// id the page shows). Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = obs.Logger(l) } }

func (o options) validate() error {
	if o.refresh < 0 || (o.refresh > 0 && o.refresh < time.Second) {
		return fmt.Errorf("console: refresh %v: must be 0 (off) or at least 1s: %w", o.refresh, ErrInvalidOption)
	}
	if o.log == nil {
		return fmt.Errorf("console: nil logger: %w", ErrInvalidOption)
	}
	return nil
}
