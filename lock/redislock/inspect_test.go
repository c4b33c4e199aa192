package redislock_test

import (
	"errors"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// TestIntegrationInspectorClosed: after Close, the Client's Inspector returns an error wrapping
// lock.ErrClosed; before it, a free lock lists nobody.
func TestIntegrationInspectorClosed(t *testing.T) {
	t.Parallel()
	c := newClient(t, newRedis(t, testenv.Redis(t)))
	in := c.Inspector()
	if cs, known, err := in.Contenders(t.Context(), testenv.Name(t)); err != nil || known || len(cs) != 0 {
		t.Fatalf("Contenders of a free lock = %+v, %v, %v; want nobody, waiters not known", cs, known, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.Contenders(t.Context(), testenv.Name(t)); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Contenders after Close = %v, want an error wrapping lock.ErrClosed", err)
	}
}
