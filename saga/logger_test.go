package saga_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/participant"
)

// withCounter is a slog.Handler (info and above) that counts WithAttrs calls and keeps the gid
// of each record, from the attributes a logger was made With.
type withCounter struct {
	mu    *sync.Mutex
	withs *int
	gids  *[]string
	attrs []slog.Attr
}

func (h withCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h withCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	gid := ""
	for _, a := range h.attrs {
		if strings.HasSuffix(a.Key, "gid") { // txkit.gid (internal/obs prefixes the keys)
			gid = a.Value.String()
		}
	}
	*h.gids = append(*h.gids, r.Message+" gid="+gid)
	return nil
}

func (h withCounter) WithAttrs(as []slog.Attr) slog.Handler {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.withs++
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

func (h withCounter) WithGroup(string) slog.Handler { return h }

// A saga that logs nothing makes no logger of its own: Logger.With formats its attributes, a cost
// every saga paid before (issue 33: 7 of the saga's allocations, per BenchmarkSaga's profile).
// A saga that logs still logs with its gid.
func TestIntegrationLoggerMadeOnUse(t *testing.T) {
	e := newEnv(t)
	h := withCounter{mu: &sync.Mutex{}, withs: new(int), gids: new([]string)}
	c := e.coordinator(coordinator.WithLogger(slog.New(h)))
	var refusing atomic.Bool // s2 refused: the second saga
	p := newParty(func(req participant.Request) error {
		if req.Op == participant.OpAction && req.Branch == "s2" && refusing.Load() {
			return fmt.Errorf("no: %w", participant.ErrRefused)
		}
		return nil
	})
	hp := register(t, c, "p", p)
	h.mu.Lock()
	before := *h.withs
	h.mu.Unlock()
	if _, err := submit(t, c, sequential(hp, 3)); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	h.mu.Lock()
	withs := *h.withs - before
	h.mu.Unlock()
	if withs != 0 {
		t.Errorf("a saga that succeeded called Logger.With %d times, want 0", withs)
	}
	refusing.Store(true)
	gid, err := submit(t, c, sequential(hp, 3))
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want participant.ErrRefused", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	want := "saga: compensating gid=" + gid
	for _, l := range *h.gids {
		if l == want {
			return
		}
	}
	t.Errorf("log %q, want a line %q", *h.gids, want)
}
