package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
	"github.com/txkit/txkit/internal/testkit/tcpproxy"
)

// The accounts of the partition trials: each trial moves 1 from partFrom (east, seeded with one
// per trial) to partTo (west).
const (
	partFrom = "partition-from"
	partTo   = "partition-to"
)

// startProxy puts a proxy between the banks and PostgreSQL for txkit_west (the banks get
// -west-addr): the link the partition trials cut.
func (h *harness) startProxy() error {
	u, err := url.Parse(h.cfg.PG)
	if err != nil {
		return fmt.Errorf("pg url: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	h.proxy, err = tcpproxy.New(net.JoinHostPort(host, port))
	if err != nil {
		return err
	}
	h.logf("partition proxy for the banks' %s connections on %s", app.West, h.proxy.Addr())
	return nil
}

// partitionEnd names how a transfer ended by its ledger rows in east and west.
func partitionEnd(east, west int) string {
	switch {
	case east > 0 && west > 0:
		return "committed on both sides"
	case east > 0:
		return "committed in east only"
	case west > 0:
		return "committed in west only"
	}
	return "aborted on both sides"
}

// partitions runs the partition trials one after the other. Each arms the west proxy to
// partition the link between the banks and txkit_west the moment a PREPARE TRANSACTION has gone
// through to it, and sends a transfer: west prepares its side, the bank never hears so, its
// PreCommit (2pc: prepare) times out and it aborts — rolling east back, but unable to reach west.
// West's prepared transaction is then the agent's (3pc) or the leader's in-doubt resolution's
// (2pc, once healed). The trial heals the link after the participant timeout plus 1s, waits
// until the transfer has settled everywhere, and classifies it by its ledger rows.
func (h *harness) partitions(ctx context.Context, rep *Report) error {
	rep.PartitionAnswers, rep.PartitionEnds = map[string]int{}, map[string]int{}
	c, err := exapp.Connect(ctx, h.cfg.PG, app.East, h.schema)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	wc, err := exapp.Connect(ctx, h.cfg.PG, app.West, h.schema)
	if err != nil {
		return err
	}
	defer wc.Close(context.WithoutCancel(ctx))
	for i := 1; i <= h.cfg.Partitions; i++ {
		// A transfer may end before its PREPARE reaches west (its first statement on a connection
		// the last heal broke, a CanCommit slowed past its timeout by a loaded machine): that trial
		// partitions nothing, so it is tried again, up to partitionAttempts times.
		for attempt := 1; ; attempt++ {
			partitioned := rep.Partitioned
			if err := h.partitionTrial(ctx, c, wc, i, attempt, rep); err != nil {
				return fmt.Errorf("partition trial %d: %w", i, err)
			}
			if rep.Partitioned > partitioned || attempt == partitionAttempts {
				break
			}
		}
	}
	return nil
}

// partitionAttempts bounds the tries of one partition trial whose transfer ended unpartitioned.
const partitionAttempts = 3

type posted struct {
	code int
	a    app.Answer
}

func (h *harness) partitionTrial(ctx context.Context, ec, wc *pgx.Conn, i, attempt int, rep *Report) error {
	rep.PartitionTrials++
	gid := fmt.Sprintf("partition-%s-%d", h.runID, i)
	if attempt > 1 {
		gid += fmt.Sprintf("-%d", attempt)
	}
	h.expected.Store(gid, true)
	h.proxy.PartitionAfter([]byte("PREPARE TRANSACTION"))
	done := make(chan posted, 1)
	go func() {
		code, a := h.post(ctx, app.Transfer{GID: gid, From: partFrom, To: partTo, Amount: 1})
		done <- posted{code, a}
	}()
	var (
		began    time.Time
		res      posted
		answered bool
	)
	for began.IsZero() && !answered {
		select {
		case res = <-done:
			answered = true
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if h.proxy.Partitioned() {
			began = time.Now()
		}
	}
	if began.IsZero() {
		h.proxy.PartitionAfter(nil)
		h.logf("partition trial %d: answered %d %s before any PREPARE reached west; not partitioned", i, res.code, res.a.Status)
	} else {
		rep.Partitioned++
		if err := exapp.Pause(ctx, time.Until(began.Add(h.cfg.ParticipantTimeout+time.Second))); err != nil {
			h.proxy.Heal()
			return err
		}
		h.proxy.Heal()
	}
	if !answered {
		select {
		case res = <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	st := res.a.Status
	if res.code == 0 {
		st = "unanswered"
	}
	rep.PartitionAnswers[st]++
	// Settled: nothing of it prepared in either database, and its log record (if any) final.
	deadline := time.Now().Add(60 * time.Second)
	for {
		gids, err := h.preparedGIDs(ctx, ec)
		if err != nil {
			return err
		}
		var status string
		err = ec.QueryRow(ctx, `select status from `+h.tablePrefix()+`global where gid = $1`, gid).Scan(&status)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if !gids[gid] && (status == "" || status == committed || status == aborted) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not settled 60s after its answer: prepared %v, log status %q", gid, gids[gid], status)
		}
		if err := exapp.Pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	var e, w int
	if err := ec.QueryRow(ctx, `select count(*) from ledger where gid = $1`, gid).Scan(&e); err != nil {
		return err
	}
	if err := wc.QueryRow(ctx, `select count(*) from ledger where gid = $1`, gid).Scan(&w); err != nil {
		return err
	}
	end := partitionEnd(e, w)
	partitioned := "partitioned after the PREPARE reached west, healed " + (h.cfg.ParticipantTimeout + time.Second).String() + " later"
	if began.IsZero() {
		partitioned = "not partitioned" // its end is checked with every other transfer's, not counted here
	} else {
		rep.PartitionEnds[end]++
	}
	h.logf("partition trial %d (%s): %s; answer %d %s; %s", i, gid, partitioned, res.code, st, end)
	return nil
}
