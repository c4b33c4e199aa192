package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs/obstest"
)

// An outage begins at the first failed question, not at later ones; a pass asks no more after a
// failure; the gauge follows the clock; the fallback is due once the outage has lasted it; End
// ends it and resets the gauge.
func TestOutage(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Unix(1_000_000, 0)
	w, err := newOutage(reg, "test", "table", "t", "test branches", time.Minute, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	wait := func() float64 { return obstest.Value(t, reg, "txkit_test_log_wait_seconds", "table", "t") }
	refused := errors.New("connection refused")
	fail := func(context.Context) error { return refused }
	asked := 0
	answer := func(context.Context) error { asked++; return nil }

	down := false
	if began, err := w.ask(t.Context(), &down, fail); !began || !errors.Is(err, refused) || !down {
		t.Fatalf("first failure: began %v, err %v, down %v; want the outage begun and the pass down", began, err, down)
	}
	if _, err := w.ask(t.Context(), &down, answer); !errors.Is(err, errLogDown) || asked != 0 {
		t.Fatalf("a question after a failure in the same pass = %v (asked %d); want errLogDown without asking", err, asked)
	}
	now = now.Add(59 * time.Second)
	down = false
	if began, _ := w.ask(t.Context(), &down, fail); began {
		t.Fatal("a later failure began another outage")
	}
	if got := wait(); got != 59 || w.fallbackDue() {
		t.Fatalf("after 59 s: gauge %v, fallback due %v; want 59 and not due", got, w.fallbackDue())
	}
	now = now.Add(time.Second)
	if !w.fallbackDue() {
		t.Fatal("the fallback is not due after the outage lasted it")
	}
	w.fellBack()
	if got := obstest.Value(t, reg, "txkit_test_fallbacks_total", "table", "t"); got != 1 {
		t.Fatalf("fallbacks counter %v, want 1", got)
	}
	down = false
	if began, err := w.ask(t.Context(), &down, answer); began || err != nil || down || asked != 1 {
		t.Fatalf("an answer: began %v, err %v, down %v, asked %d", began, err, down, asked)
	}
	if lasted, ok := w.end(); !ok || lasted != time.Minute {
		t.Fatalf("End = %v, %v; want the outage of 1m0s", lasted, ok)
	}
	if _, ok := w.end(); ok || wait() != 0 || w.fallbackDue() {
		t.Fatalf("after End: another End reports an outage %v, gauge %v, fallback due %v", ok, wait(), w.fallbackDue())
	}

	// Without a fallback it is never due; a cancelled ctx's failure begins no outage.
	never, err := newOutage(nil, "test", "table", "u", "test branches", 0, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	down = false
	if began, _ := never.ask(ctx, &down, fail); began || down {
		t.Fatalf("a failure under a cancelled ctx: began %v, down %v", began, down)
	}
	down = false
	_, _ = never.ask(t.Context(), &down, fail)
	now = now.Add(time.Hour)
	if never.fallbackDue() {
		t.Fatal("a Wait without a fallback has one due")
	}
}
