package idempotency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/idempotency"
)

// Claims count as first or duplicate, through Claim, ClaimFirst and Begin; two stores on one
// registry share the series; a clashing registry fails New with ErrInvalidOption.
func TestIntegrationClaimMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, store, ctx := begin(t, idempotency.WithRegisterer(reg))
	other := newStore(t, s, idempotency.WithTable("", "other_keys"), idempotency.WithRegisterer(reg))

	for _, key := range []string{"a", "a", "b"} {
		if _, err := store.Claim(ctx, s.Pool, "points", key); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.ClaimFirst(ctx, s.Pool, "points", "a"); err != nil { // its own table: first
		t.Fatal(err)
	}
	if err := other.ClaimFirst(ctx, s.Pool, "points", "a"); !errors.Is(err, idempotency.ErrDuplicate) {
		t.Fatalf("second ClaimFirst = %v, want ErrDuplicate", err)
	}
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := store.Begin(ctx, tx, "http", "k", []byte("fp")); err != nil || !rec.New {
		t.Fatalf("Begin = %+v, %v", rec, err)
	}
	if err := store.Complete(ctx, tx, "http", "k", []byte("200")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := store.Begin(ctx, s.Pool, "http", "k", []byte("fp")); err != nil || rec.New {
		t.Fatalf("Begin again = %+v, %v", rec, err)
	}
	if _, err := store.Begin(ctx, s.Pool, "http", "k", []byte("another")); !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Fatalf("Begin with another fingerprint = %v", err)
	}
	// first: a, b (store), a (other), k (Begin); duplicate: a (store), a (other), k (Begin again).
	if n, err := testutil.GatherAndCount(reg, "txkit_idempotency_claims_total"); err != nil || n != 2 {
		t.Fatalf("claims series = %d, %v; want 2 (first, duplicate)", n, err)
	}
	want := `
# HELP txkit_idempotency_claims_total Idempotency keys claimed, by result: first (claimed by this call) or duplicate (already claimed).
# TYPE txkit_idempotency_claims_total counter
txkit_idempotency_claims_total{result="duplicate"} 3
txkit_idempotency_claims_total{result="first"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "txkit_idempotency_claims_total"); err != nil {
		t.Fatal(err)
	}

	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_idempotency_claims_total", Help: "not a counter"}))
	if _, err := idempotency.New(s.Pool, idempotency.WithRegisterer(clash)); !errors.Is(err, idempotency.ErrInvalidOption) {
		t.Fatalf("New on a clashing registry = %v, want ErrInvalidOption", err)
	}
}
