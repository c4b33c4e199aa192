package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/txkit/txkit/participant"
)

// CallAttempts calls req on the participant of t ([Base.CallTarget]) up to attempts times while
// it fails, waiting in between from Cfg.BackoffMin doubling to Cfg.BackoffMax, and returns the
// last error. A refused action or try returns at once (logged at info). Any other failure counts in
// Failures and is logged to log() (called only to log) with the step, op and attempt; a refusal of another op (a
// compensation) breaks the protocol: it also counts in Violations and is logged as an error. ctx
// ending stops the waiting. Sagas and workflows call their steps through it.
func (b *Base) CallAttempts(ctx context.Context, log func() *slog.Logger, t Target, req participant.Request, attempts int) error {
	wait := b.Cfg.BackoffMin
	for attempt := 1; ; attempt++ {
		err := b.CallTarget(ctx, t, req)
		if err == nil {
			return nil
		}
		if (req.Op == participant.OpAction || req.Op == participant.OpTry) && errors.Is(err, participant.ErrRefused) {
			log().InfoContext(ctx, b.name+": "+req.Op.String()+" refused", slog.String("step", req.Branch), slog.Any("err", err))
			return err
		}
		b.Failures.Add(1)
		lvl := slog.LevelWarn
		if errors.Is(err, participant.ErrRefused) {
			b.Violations.Add(1)
			lvl = slog.LevelError
			err = fmt.Errorf("protocol violation, %s refused (retrying): %w", req.Op, err)
		}
		log().Log(ctx, lvl, b.name+": call failed", slog.String("step", req.Branch), slog.String("op", req.Op.String()),
			slog.Int("attempt", attempt), slog.Any("err", err))
		if attempt >= attempts || ctx.Err() != nil {
			return err
		}
		tm := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return err
		case <-tm.C:
		}
		wait = min(2*wait, b.Cfg.BackoffMax)
	}
}
