// Command order is the stock example's order service. POST /orders {"sku", "qty"} records the
// order with an operation id generated once for it, then asks the stock services to deduct the
// stock for that operation: a call that fails or times out (the instance died, the lock was lost,
// the answer was late) is retried with the same operation id on the next instance, so the stock
// service recognises a retry of an operation it has already applied. It answers 200 deducted,
// 409 refused (too little stock), or 503 undecided when it gave up retrying (-give-up).
//
//	go run ./examples/stock/order -schema demo -stock http://127.0.0.1:8081,http://127.0.0.1:8082
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/stock/shop"
)

type config struct {
	shop.Service
	stock               string
	callTimeout, giveUp time.Duration
}

func main() {
	var c config
	c.Flags("orders table")
	flag.StringVar(&c.stock, "stock", "http://127.0.0.1:8081", "base URLs of the stock-service instances, comma-separated")
	flag.DurationVar(&c.callTimeout, "call-timeout", 5*time.Second, "bound of each stock-service call")
	flag.DurationVar(&c.giveUp, "give-up", time.Minute, "stop retrying an order after this long (it is answered undecided)")
	flag.Parse()
	log := exapp.Logger("order")
	shop.Main(log, "order service", func(ctx context.Context) error { return run(ctx, c, log) })
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	var stock []string
	for _, u := range strings.Split(c.stock, ",") {
		if u = strings.TrimSpace(u); u != "" {
			stock = append(stock, strings.TrimSuffix(u, "/"))
		}
	}
	if len(stock) == 0 {
		return errors.New("no stock service: set -stock")
	}
	pool, err := c.Pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	s := &service{pool: pool, log: log, stock: stock, giveUp: c.giveUp,
		client: &http.Client{Timeout: c.callTimeout, Transport: tr}}
	mux := http.NewServeMux()
	exapp.Metrics(mux)
	mux.HandleFunc("POST /orders", s.order)
	return c.Serve(ctx, mux)
}

// service places orders; it is safe for concurrent use.
type service struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	stock  []string
	client *http.Client
	giveUp time.Duration
	next   atomic.Uint64 // round robin over the stock instances
}

func (s *service) order(w http.ResponseWriter, r *http.Request) {
	var req shop.OrderRequest
	if !shop.Decode(w, r, &req) {
		return
	}
	if err := shop.Check(req.SKU, req.Qty); err != nil {
		exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	// The operation id is generated once per order: every retry below carries it.
	ans := shop.OrderAnswer{OpID: uuid.NewString(), Status: shop.Pending}
	ctx := r.Context()
	if _, err := s.pool.Exec(ctx, `insert into orders (op_id, sku, qty, status) values ($1, $2, $3, $4)`,
		ans.OpID, req.SKU, req.Qty, ans.Status); err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "order not recorded", err, "sku", req.SKU)
		return
	}
	ans.Status, ans.Attempts = s.deduct(ctx, shop.DeductRequest{OpID: ans.OpID, SKU: req.SKU, Qty: req.Qty})
	if _, err := s.pool.Exec(context.WithoutCancel(ctx), `update orders set status = $2, attempts = $3, answered_at = clock_timestamp() where op_id = $1`,
		ans.OpID, ans.Status, ans.Attempts); err != nil {
		s.log.Error("recording the outcome failed", "op_id", ans.OpID, "status", ans.Status, "err", err)
	}
	code := map[shop.Status]int{shop.Deducted: http.StatusOK, shop.Refused: http.StatusConflict}[ans.Status]
	if code == 0 {
		code = http.StatusServiceUnavailable
	}
	exapp.WriteJSON(w, code, ans)
}

// deduct calls the stock instances in turn with req until one answers deducted or refused, or
// until the give-up time has passed (undecided). It returns the outcome and the calls made.
func (s *service) deduct(ctx context.Context, req shop.DeductRequest) (shop.Status, int) {
	ctx, cancel := context.WithTimeout(ctx, s.giveUp)
	defer cancel()
	body, _ := json.Marshal(req)
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		base := s.stock[s.next.Add(1)%uint64(len(s.stock))]
		st, err := s.call(ctx, base, body)
		if err == nil {
			return st, attempt
		}
		s.log.Warn("stock call failed; retrying with the same op id", "op_id", req.OpID, "sku", req.SKU,
			"stock", base, "attempt", attempt, "err", err)
		if exapp.Pause(ctx, backoff) != nil {
			return shop.Undecided, attempt
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// call makes one stock-service call: the outcome, or an error when there is none to act on.
func (s *service) call(ctx context.Context, base string, body []byte) (shop.Status, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/deduct", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(hreq)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var ans shop.DeductAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return "", fmt.Errorf("%s: %s", base, resp.Status)
	}
	if (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusConflict) && ans.Status.Final() {
		return ans.Status, nil
	}
	return "", fmt.Errorf("%s: %s", base, resp.Status)
}
