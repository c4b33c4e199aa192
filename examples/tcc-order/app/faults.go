package app

import (
	"context"
	"math/rand/v2"
	"net/http"
	"path"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/txkit/txkit/participant"
)

// Faults injects the drill's faults in front of a participant's handler. Zero values inject
// nothing. Faults is safe for concurrent use.
type Faults struct {
	RefuseRate float64       // tries and saga actions answered 409 without running (a business refusal)
	FailRate   float64       // requests answered 500 without running (the coordinator retries)
	LostRate   float64       // requests run and committed, then answered 500 (a lost reply: the retry is a duplicate)
	Delay      time.Duration // every request waits a random time up to Delay first
	SlowRate   float64       // requests that wait Slow first (longer than the coordinator's call timeout)
	Slow       time.Duration

	Refused, Failed, Lost, Slowed atomic.Int64
}

// Enabled reports whether f injects anything.
func (f *Faults) Enabled() bool {
	return f.RefuseRate > 0 || f.FailRate > 0 || f.LostRate > 0 || f.Delay > 0 || f.SlowRate > 0
}

// serve serves r, a request for op, with h behind the faults. Only the ops a participant may
// refuse (try, action) are refused: refusing a confirm, cancel or compensation would break the
// protocol, not test it.
func (f *Faults) serve(w http.ResponseWriter, r *http.Request, op participant.Op, h http.Handler) {
	if f.Delay > 0 {
		sleep(r.Context(), rand.N(f.Delay))
	}
	if f.SlowRate > 0 && rand.Float64() < f.SlowRate {
		f.Slowed.Add(1)
		sleep(r.Context(), f.Slow)
	}
	if (op == participant.OpTry || op == participant.OpAction) && f.RefuseRate > 0 && rand.Float64() < f.RefuseRate {
		f.Refused.Add(1)
		http.Error(w, "injected refusal", participant.StatusRefused)
		return
	}
	if f.FailRate > 0 && rand.Float64() < f.FailRate {
		f.Failed.Add(1)
		http.Error(w, "injected failure", http.StatusInternalServerError)
		return
	}
	if f.LostRate > 0 && rand.Float64() < f.LostRate {
		rec := &discard{header: http.Header{}}
		h.ServeHTTP(rec, r)
		f.Lost.Add(1)
		http.Error(w, "injected lost reply", http.StatusInternalServerError)
		return
	}
	h.ServeHTTP(w, r)
}

// Interceptor is [Faults.serve] for gRPC: the same faults in front of the methods of the shoppb
// participants (the interceptors after it — the barrier's — and the method run only when no fault
// stops the call first). A refusal is ABORTED, a failure and a lost reply UNAVAILABLE; only Try
// and Action are refused.
func (f *Faults) Interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if f.Delay > 0 {
		sleep(ctx, rand.N(f.Delay))
	}
	if f.SlowRate > 0 && rand.Float64() < f.SlowRate {
		f.Slowed.Add(1)
		sleep(ctx, f.Slow)
	}
	if m := path.Base(info.FullMethod); (m == "Try" || m == "Action") && f.RefuseRate > 0 && rand.Float64() < f.RefuseRate {
		f.Refused.Add(1)
		return nil, status.Error(codes.Aborted, "injected refusal")
	}
	if f.FailRate > 0 && rand.Float64() < f.FailRate {
		f.Failed.Add(1)
		return nil, status.Error(codes.Unavailable, "injected failure")
	}
	if f.LostRate > 0 && rand.Float64() < f.LostRate {
		_, _ = h(ctx, req)
		f.Lost.Add(1)
		return nil, status.Error(codes.Unavailable, "injected lost reply")
	}
	return h(ctx, req)
}

// Stats returns the counts of injected faults.
func (f *Faults) Stats() map[string]int64 {
	return map[string]int64{"refused": f.Refused.Load(), "failed": f.Failed.Load(), "lost": f.Lost.Load(), "slowed": f.Slowed.Load()}
}

// FaultFlags are the fault injection flags of a participant service.
func FaultFlags(f *Faults, fs interface {
	Float64Var(p *float64, name string, value float64, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
}) {
	fs.Float64Var(&f.RefuseRate, "refuse-rate", 0, "fraction of tries and saga actions refused (HTTP 409, gRPC ABORTED) without running")
	fs.Float64Var(&f.FailRate, "fail-rate", 0, "fraction of requests answered HTTP 500 (gRPC UNAVAILABLE) without running")
	fs.Float64Var(&f.LostRate, "lost-rate", 0, "fraction of requests run and committed, then answered HTTP 500 or gRPC UNAVAILABLE (the retry is a duplicate)")
	fs.DurationVar(&f.Delay, "delay", 0, "each request first waits a random time up to this")
	fs.Float64Var(&f.SlowRate, "slow-rate", 0, "fraction of requests that first wait -slow (past the coordinator's call timeout)")
	fs.DurationVar(&f.Slow, "slow", 3*time.Second, "the wait of a slow request")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// discard is a ResponseWriter that drops the reply.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
