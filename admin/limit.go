package admin

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
)

// The reasons of txkit_admin_refused_total: the refusals that get no audit row.
const (
	refusedUnauthorized = "unauthorized" // no credentials, or ones that do not verify; read-only
	refusedBadRequest   = "bad_request"  // a body that could not be read, before authentication
	refusedRateLimited  = "rate_limited" // the client's address is over its rate (429)
)

// refusals counts the POSTs refused before an actor is known — a metric and a sampled log line
// instead of an audit row each, so that a stranger cannot grow the audit table or the log.
type refusals struct {
	total *prometheus.CounterVec
	log   *slog.Logger
	now   func() time.Time
	every time.Duration // at most one log line per every

	mu         sync.Mutex
	last       time.Time // when the last line was logged
	suppressed int       // refusals since then, not logged
}

// logEvery is how often at most a refusal is logged; the line counts the ones left out.
const logEvery = 10 * time.Second

func newRefusals(reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*refusals, error) {
	c, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prometheus.BuildFQName(obs.Namespace, "admin", "refused_total"),
		Help: "Admin API POSTs refused before authentication, without an audit row, by reason: unauthorized, bad_request, rate_limited.",
	}, []string{"reason"}))
	if err != nil {
		return nil, fmt.Errorf("admin: metrics: %w: %w", err, ErrInvalidOption)
	}
	return &refusals{total: c, log: log, now: now, every: logEvery}, nil
}

// add counts one refusal of r for reason, and logs it unless a line was logged less than
// r.every ago (the next line says how many were left out).
func (f *refusals) add(r *http.Request, reason string, err error) {
	f.total.WithLabelValues(reason).Inc()
	f.mu.Lock()
	now := f.now()
	if !f.last.IsZero() && now.Sub(f.last) < f.every {
		f.suppressed++
		f.mu.Unlock()
		return
	}
	n := f.suppressed
	f.last, f.suppressed = now, 0
	f.mu.Unlock()
	f.log.Warn("admin: request refused", "reason", reason, "remote", r.RemoteAddr, "path", r.URL.Path,
		"err", err, "refused_since_last_line", n)
}

// limiter is a token bucket per client address: rate tokens a second up to burst, one per POST.
// It tracks at most maxAddrs addresses; past that, buckets that are full again are forgotten,
// and if none is, new addresses share one bucket, so memory stays bounded under a flood from
// many addresses.
type limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

const maxAddrs = 4096

// overflow is the bucket key of the addresses that find the table full.
const overflow = ""

func newLimiter(rate float64, burst int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// allow takes a token from addr's bucket (addr is host:port or a host) and reports whether there
// was one.
func (l *limiter) allow(addr string) bool {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= maxAddrs {
			l.forgetFull(now)
		}
		if len(l.buckets) >= maxAddrs {
			addr = overflow
			b = l.buckets[addr]
		}
		if b == nil {
			b = &bucket{tokens: l.burst, at: now}
			l.buckets[addr] = b
		}
	}
	b.refill(now, l.rate, l.burst)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// retryAfter is the Retry-After of a 429: the whole seconds until a token is back.
func (l *limiter) retryAfter() string {
	return strconv.Itoa(int(math.Ceil(1 / l.rate)))
}

func (b *bucket) refill(now time.Time, rate, burst float64) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
		b.at = now
	}
}

// forgetFull drops the buckets that have refilled: their addresses are as if never seen.
func (l *limiter) forgetFull(now time.Time) {
	for k, b := range l.buckets {
		if b.refill(now, l.rate, l.burst); b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}
