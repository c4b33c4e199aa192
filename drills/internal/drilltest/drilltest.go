// Package drilltest runs an example's demo harness from that example's tests: the demo's Run
// under a deadline, its report logged, and the test failed when the harness fails or its checks do
// not hold. It serves this repository's example tests only.
package drilltest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Report is what a demo harness's Run returns: OK returns its broken checks as one error, or nil.
type Report interface{ OK() error }

// Run calls run(ctx, cfg) with a ctx that ends with the test or after timeout, logs the report
// when it prints itself (fmt.Stringer), and fails the test at once when run returns an error or
// the report's OK does not hold. It returns the report for the test's own checks.
func Run[C any, R Report](t testing.TB, timeout time.Duration, run func(context.Context, C) (R, error), cfg C) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	rep, err := run(ctx, cfg)
	if s, ok := any(rep).(fmt.Stringer); ok {
		t.Logf("report:\n%s", s)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.OK(); err != nil {
		t.Fatal(err)
	}
	return rep
}
