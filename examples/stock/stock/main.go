// Command stock is the stock example's stock service: the documents' flash-sale stock deduction
// on a distributed lock. Run several instances on one schema; POST /deduct {"op_id", "sku", "qty"}
// deducts qty items of sku for the operation op_id, at most once whatever the retries:
//
//  1. take the SKU's lock (-lock zk, zk-unfair, pg, redis or redlock; servers from the TXKIT_*
//     variables) — the request's context bounds the wait;
//  2. under the lease's context: look op_id up in stock_flow; found → answer deducted (a retry of
//     an operation already applied);
//  3. read the stock; too little → answer refused;
//  4. write, in one transaction that first passes the fence with the lease's token (so a holder
//     deposed mid-way cannot write after a newer holder): insert the stock_flow row and set the
//     stock to what was read minus qty;
//  5. release the lock.
//
// The read and the write are separate statements: only the lock keeps two deductions of one SKU
// from both reading the same stock. -lock none takes no lock (and no fence), to show what the
// demo's checks catch without it; -window widens the gap between the read and the write.
//
// -kill-hook adds POST /hold, for the demo: the next deduction that takes a lock on this instance
// stops after its read, while holding the lock, and GET /stats says so — the demo SIGKILLs the
// instance then.
//
//	go run ./examples/stock/stock -schema demo -lock zk
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/stock/shop"
	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/lock"
)

type config struct {
	shop.Service
	lock, prefix, id string
	ttl, window      time.Duration
	killHook         bool
}

func main() {
	var c config
	c.Flags("stock tables")
	flag.StringVar(&c.lock, "lock", "zk", "lock backend: zk, zk-unfair, pg, redis, redlock, or none (no lock: oversells)")
	flag.StringVar(&c.prefix, "lock-prefix", "stock", "lock names are <prefix>/<sku>")
	flag.StringVar(&c.id, "id", "stock", "instance id in the logs")
	flag.DurationVar(&c.ttl, "ttl", 2*time.Second, "how long a dead holder keeps a lock (ZooKeeper session timeout, lease TTL)")
	flag.DurationVar(&c.window, "window", 2*time.Millisecond, "pause between reading the stock and writing it")
	flag.BoolVar(&c.killHook, "kill-hook", false, "serve POST /hold (the demo's kill while holding a lock)")
	flag.Parse()
	log := exapp.Logger("stock").With("id", c.id)
	shop.Main(log, "stock service", func(ctx context.Context) error { return run(ctx, c, log) })
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	pool, err := c.Pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	s := &service{pool: pool, log: log, window: c.window, prefix: c.prefix, free: map[string][]lock.Locker{}}
	if c.lock != "none" {
		locks, err := exapp.OpenLocks(ctx, c.lock, log, exapp.WithLockTTL(c.ttl), exapp.WithLocksRegisterer(reg))
		if err != nil {
			return err
		}
		defer locks.Close()
		f, err := fence.New(pool, fence.WithTable(c.Schema, ""))
		if err != nil {
			return err
		}
		if err := f.Migrate(ctx); err != nil {
			return err
		}
		s.locks, s.fence = locks, f
	}
	mux.HandleFunc("POST /deduct", s.deduct)
	mux.HandleFunc("GET /stats", s.stats)
	if c.killHook {
		mux.HandleFunc("POST /hold", func(w http.ResponseWriter, _ *http.Request) {
			s.armed.Store(true)
			w.WriteHeader(http.StatusNoContent)
		})
	}
	log.Info("stock service starting", "lock", c.lock, "schema", c.Schema, "window", c.window)
	return c.Serve(ctx, mux)
}

// service deducts stock. It is safe for concurrent use: each request takes a Locker value of its
// own from free (Locker values are reentrant, so two requests must never share one).
type service struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	window time.Duration
	prefix string
	locks  *exapp.Locks // nil with -lock none
	fence  *fence.Fence

	mu   sync.Mutex
	free map[string][]lock.Locker // idle Locker values by SKU

	armed   atomic.Bool             // POST /hold: the next holder stops after its read
	holding atomic.Pointer[holding] // set while a holder is stopped for the kill

	deducted, duplicates, refused, failed atomic.Int64
}

// holding is what GET /stats says about a deduction stopped for the kill.
type holding struct {
	OpID  string `json:"op_id"`
	SKU   string `json:"sku"`
	Token string `json:"token"`
}

// locker returns an idle Locker value on sku's lock, or a new one.
func (s *service) locker(sku string) (lock.Locker, error) {
	s.mu.Lock()
	if free := s.free[sku]; len(free) > 0 {
		l := free[len(free)-1]
		s.free[sku] = free[:len(free)-1]
		s.mu.Unlock()
		return l, nil
	}
	s.mu.Unlock()
	return s.locks.Locker(s.prefix + "/" + sku)
}

// idle gives back a Locker value that holds nothing.
func (s *service) idle(sku string, l lock.Locker) {
	s.mu.Lock()
	s.free[sku] = append(s.free[sku], l)
	s.mu.Unlock()
}

func (s *service) deduct(w http.ResponseWriter, r *http.Request) {
	var req shop.DeductRequest
	if !shop.Decode(w, r, &req) {
		return
	}
	if err := shop.Check(req.SKU, req.Qty); err != nil || req.OpID == "" || len(req.OpID) > 64 {
		exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "want op_id (1 to 64 bytes), sku (1 to 64 bytes) and qty (1 to 1000)"})
		return
	}
	ans, err := s.apply(r.Context(), req)
	switch {
	case err != nil:
		s.failed.Add(1)
		exapp.Fail(w, s.log, http.StatusServiceUnavailable, "deduction failed; retry it with the same op_id", err,
			"op_id", req.OpID, "sku", req.SKU)
	case ans.Status == shop.Refused:
		s.refused.Add(1)
		exapp.WriteJSON(w, http.StatusConflict, ans)
	default:
		if ans.Duplicate {
			s.duplicates.Add(1)
		} else {
			s.deducted.Add(1)
		}
		exapp.WriteJSON(w, http.StatusOK, ans)
	}
}

// apply runs the deduction under the SKU's lock: ctx bounds the wait for the lock, and the
// deduction runs under the lease's context, so it stops if the lock is lost (and not when the
// caller hangs up: its retry then finds the deduction done).
func (s *service) apply(ctx context.Context, req shop.DeductRequest) (shop.DeductAnswer, error) {
	if s.locks == nil {
		return s.deductOnce(ctx, req, nil)
	}
	l, err := s.locker(req.SKU)
	if err != nil {
		return shop.DeductAnswer{}, err
	}
	lease, err := l.Lock(ctx)
	if err != nil {
		s.idle(req.SKU, l)
		return shop.DeductAnswer{}, fmt.Errorf("lock %s: %w", req.SKU, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := l.Unlock(uctx); err != nil {
			s.log.Warn("unlock failed; dropping the Locker", "sku", req.SKU, "err", err)
			return
		}
		s.idle(req.SKU, l)
	}()
	ans, err := s.deductOnce(lease.Context(), req, lease)
	if err != nil && lease.Err() != nil {
		err = fmt.Errorf("%w (lock %s: %w)", err, req.SKU, lease.Err())
	}
	return ans, err
}

// deductOnce looks the operation up, reads the stock and writes the deduction; lease is nil
// without a lock.
func (s *service) deductOnce(ctx context.Context, req shop.DeductRequest, lease lock.Lease) (shop.DeductAnswer, error) {
	var qty int64
	err := s.pool.QueryRow(ctx, `select qty from stock_flow where op_id = $1`, req.OpID).Scan(&qty)
	if err == nil {
		return shop.DeductAnswer{Status: shop.Deducted, Duplicate: true}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return shop.DeductAnswer{}, fmt.Errorf("look up op %s: %w", req.OpID, err)
	}
	var stock int64
	err = s.pool.QueryRow(ctx, `select stock from sku where sku = $1`, req.SKU).Scan(&stock)
	if errors.Is(err, pgx.ErrNoRows) {
		return shop.DeductAnswer{Status: shop.Refused}, nil
	}
	if err != nil {
		return shop.DeductAnswer{}, fmt.Errorf("read the stock of %s: %w", req.SKU, err)
	}
	if err := s.holdForKill(ctx, req, lease); err != nil {
		return shop.DeductAnswer{}, err
	}
	if stock < req.Qty {
		return shop.DeductAnswer{Status: shop.Refused, Stock: stock}, nil
	}
	if err := exapp.Pause(ctx, s.window); err != nil {
		return shop.DeductAnswer{}, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if lease != nil {
			if err := s.fence.Check(ctx, tx, "stock:"+req.SKU, lease.Token()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `insert into stock_flow (op_id, sku, qty) values ($1, $2, $3)`, req.OpID, req.SKU, req.Qty); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `update sku set stock = $2 where sku = $1`, req.SKU, stock-req.Qty)
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "stock_flow_pkey" {
		// Without a lock, a retry can race the call it retries: the first one's row stands.
		return shop.DeductAnswer{Status: shop.Deducted, Duplicate: true, Stock: stock}, nil
	}
	if err != nil {
		return shop.DeductAnswer{}, fmt.Errorf("deduct %d of %s for op %s: %w", req.Qty, req.SKU, req.OpID, err)
	}
	return shop.DeductAnswer{Status: shop.Deducted, Stock: stock}, nil
}

// holdForKill stops the deduction, holding the lock, when POST /hold armed it, until ctx ends:
// the demo SIGKILLs the instance meanwhile.
func (s *service) holdForKill(ctx context.Context, req shop.DeductRequest, lease lock.Lease) error {
	if !s.armed.CompareAndSwap(true, false) {
		return nil
	}
	h := &holding{OpID: req.OpID, SKU: req.SKU}
	if lease != nil {
		h.Token = lease.Token().String()
	}
	s.holding.Store(h)
	s.log.Info("holding the lock until killed", "op_id", req.OpID, "sku", req.SKU, "token", h.Token)
	<-ctx.Done()
	s.holding.Store(nil)
	return fmt.Errorf("held for the kill: %w", context.Cause(ctx))
}

func (s *service) stats(w http.ResponseWriter, _ *http.Request) {
	exapp.WriteJSON(w, http.StatusOK, map[string]any{
		"holding":  s.holding.Load(),
		"deducted": s.deducted.Load(), "duplicates": s.duplicates.Load(), "refused": s.refused.Load(), "failed": s.failed.Load(),
	})
}
