package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/txkit/txkit/internal/core"
)

// Overview is the state of things at a glance: what the console's first page shows.
type Overview struct {
	At                  time.Time    `json:"at"` // PostgreSQL's clock when it was read
	Leaders             []Leader     `json:"leaders"`
	Outbox              *OutboxState `json:"outbox,omitempty"` // nil when the outbox table does not exist
	FailedNotifications int64        `json:"failed_notifications"`
	// OldestUnfinished is the unfinished global transaction created first, in any log; nil when
	// every transaction is finished.
	OldestUnfinished *Unfinished `json:"oldest_unfinished,omitempty"`
	Unfinished       int64       `json:"unfinished"` // unfinished transactions in all logs
	LastHour         Failures    `json:"last_hour"`
	// Figures are the txkit_ metrics of the gatherer given with [WithMetrics], by name: a
	// counter's or gauge's value summed over its labels; a histogram's or summary's count of
	// observations, as name_count. Nil without a gatherer.
	Figures map[string]float64 `json:"figures,omitempty"`
}

// Unfinished names an unfinished global transaction and its age.
type Unfinished struct {
	GID    string        `json:"gid"`
	Log    string        `json:"log"`
	Kind   string        `json:"kind"`
	Status string        `json:"status"`
	Age    time.Duration `json:"age_ns"`
}

// Failures counts what went wrong in a period.
type Failures struct {
	// Aborted is the global transactions that ended cancelled or compensated (by updated_at);
	// Refused is those of them a participant refused (a business refusal, not a fault), TimedOut
	// those cancelled at their timeout ([Transaction.AbortCause]). The rest were rolled back by
	// their starters, after a failure or by choice.
	Aborted  int64 `json:"aborted"`
	Refused  int64 `json:"refused"`
	TimedOut int64 `json:"timed_out"`
	// DeadMessages is the outbox messages now dead whose last publish failed in the period (the
	// outbox keeps no update time: its failure time is next_attempt_at less the backoff, so this
	// counts those whose next_attempt_at is in the period or after it).
	DeadMessages int64 `json:"dead_messages"`
	// FailedNotifications is the notifications that ran out of attempts in the period (by
	// updated_at).
	FailedNotifications int64 `json:"failed_notifications"`
}

// Overview reads the leaders, the outbox backlog, the failed notifications, the oldest
// unfinished transaction and the failures of the last hour, and the figures of the gatherer
// ([WithMetrics]). Tables that do not exist count as empty (the outbox's leaves Outbox nil). It
// blocks for a few queries per log and one read per election; ctx scopes the call.
func (a *Admin) Overview(ctx context.Context) (Overview, error) {
	var ov Overview
	if err := a.pool.QueryRow(ctx, `select now()`).Scan(&ov.At); err != nil {
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	}
	var err error
	if ov.Leaders, err = a.Leaders(ctx); err != nil {
		return Overview{}, err
	}
	switch s, err := a.Outbox(ctx); {
	case missing(err):
	case err != nil:
		return Overview{}, fmt.Errorf("admin: overview: %w", err)
	default:
		ov.Outbox = &s
		err := a.pool.QueryRow(ctx, `select count(*) from `+a.obT+` where status = 'dead' and next_attempt_at > now() - interval '1 hour'`).
			Scan(&ov.LastHour.DeadMessages)
		if err != nil {
			return Overview{}, fmt.Errorf("admin: overview: dead messages: %w", err)
		}
	}
	err = a.pool.QueryRow(ctx, `select count(*), count(*) filter (where updated_at > now() - interval '1 hour') from `+a.ntT+`
where next_attempt_at = 'infinity' and status = 'failed'`).Scan(&ov.FailedNotifications, &ov.LastHour.FailedNotifications)
	if err != nil && !missing(err) {
		return Overview{}, fmt.Errorf("admin: overview: notifications: %w", err)
	}
	for _, l := range a.logs {
		var (
			n, aborted, refused, timedOut int64
			gid, kind, stat               *string
			age                           *float64
		)
		// The finals list is core's constant status names, never request text.
		err := l.pool.QueryRow(ctx, `with open as (
    select gid, kind, status, created_at from `+l.global+` where status not in (`+a.finals+`)
), oldest as (
    select gid, kind, status, extract(epoch from now() - created_at)::float8 as age from open order by created_at, gid limit 1
), aborted as (
    select abort_cause from `+l.global+` where status in (`+a.finals+`) and status = any($1::text[])
        and updated_at > now() - interval '1 hour'
)
select (select count(*) from open),
    (select count(*) from aborted), (select count(*) from aborted where abort_cause = $2),
    (select count(*) from aborted where abort_cause = $3),
    o.gid, o.kind, o.status, o.age
from (select 1) one left join oldest o on true`, []string{core.StatusCancelled.String(), core.StatusCompensated.String()},
			core.CauseRefused, core.CauseTimeout).
			Scan(&n, &aborted, &refused, &timedOut, &gid, &kind, &stat, &age)
		if missing(err) {
			continue
		}
		if err != nil {
			return Overview{}, fmt.Errorf("admin: overview: log %s: %w", l.src.Name, err)
		}
		ov.Unfinished += n
		ov.LastHour.Aborted += aborted
		ov.LastHour.Refused += refused
		ov.LastHour.TimedOut += timedOut
		if gid != nil && (ov.OldestUnfinished == nil || *age > ov.OldestUnfinished.Age.Seconds()) {
			ov.OldestUnfinished = &Unfinished{GID: *gid, Log: l.src.Name, Kind: *kind, Status: *stat,
				Age: time.Duration(max(*age, 0) * float64(time.Second))}
		}
	}
	if a.o.gatherer != nil {
		ov.Figures, err = a.figures()
		if err != nil {
			a.o.log.Warn("admin: overview: gather metrics", "err", err)
		}
	}
	return ov, nil
}

// figures sums the gatherer's txkit_ metrics over their labels.
func (a *Admin) figures() (map[string]float64, error) {
	fams, err := a.o.gatherer.Gather()
	out := map[string]float64{}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "txkit_") {
			continue
		}
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name] += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] += m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				out[name] += m.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				out[name+"_count"] += float64(m.GetSummary().GetSampleCount())
			}
		}
	}
	return out, err
}
