package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// ParticipantConfig is what [RunParticipant] needs to serve a participant.
type ParticipantConfig struct {
	Resource Resource
	Listen   string // HTTP: the ops (POST /tcc, /saga) unless Transport is gRPC; GET /healthz and /stats
	Pool     *pgxpool.Pool
	Log      *slog.Logger
	Faults   *Faults
	// Secret is the HMAC key the order service signs its calls with: the barrier's handlers
	// answer 401, and run nothing, for a request not signed with it.
	Secret string
	// NoBarrier applies ops without the barrier: a duplicate is applied again, a cancel or
	// compensation without its try or action gives back what was never taken. Only for showing
	// that the demo's checks catch it.
	NoBarrier bool
	// Transport says how the ops are served: HTTP on Listen, or gRPC on GRPCListen (the shoppb
	// Stock or Account service; GET /healthz says the address, as "grpc").
	Transport  Transport
	GRPCListen string
}

// ParticipantMain is the main function of the participant service of r: it reads the flags,
// creates and seeds r's tables in the run's schema, and serves them with [RunParticipant] until
// SIGINT or SIGTERM. It exits 1 when the service fails.
func ParticipantMain(r Resource) {
	listen := flag.String("listen", "127.0.0.1:0", "HTTP address")
	transport := TransportHTTP
	flag.Var(&transport, "transport", "how the ops are served: http (POST /tcc, /saga on -listen) or grpc (shop.v1."+
		map[string]string{"stock": "Stock", "account": "Account"}[r.Name]+" on -grpc-listen)")
	grpcListen := flag.String("grpc-listen", "127.0.0.1:0", "gRPC address (with -transport grpc)")
	pg := flag.String("pg", exapp.Env("TXKIT_PG_URL", DefaultPG), "PostgreSQL URL (its database is replaced by -db)")
	db := flag.String("db", "txkit_"+r.Name, "database of the "+r.Name+" service (created if missing)")
	schema := flag.String("schema", "tcc_order", "schema of this run")
	seed := flag.String("seed", "", "initial rows, "+r.Key+"="+r.Free+",... (inserted only when the "+r.Key+" is new)")
	noBarrier := flag.Bool("no-barrier", false, "apply ops WITHOUT the participant barrier (to see the demo's checks fail)")
	var faults Faults
	FaultFlags(&faults, flag.CommandLine)
	flag.Parse()
	log := exapp.Logger(r.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := func() error {
		secret, err := Secret()
		if err != nil {
			return err
		}
		initial, err := parseSeed(*seed)
		if err != nil {
			return err
		}
		pool, err := exapp.Pool(ctx, *pg, *db, *schema, 0)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := r.Migrate(ctx, pool); err != nil {
			return err
		}
		if err := r.Seed(ctx, pool, initial); err != nil {
			return err
		}
		return RunParticipant(ctx, ParticipantConfig{Resource: r, Listen: *listen, Transport: transport, GRPCListen: *grpcListen,
			Pool: pool, Log: log, Faults: &faults, Secret: secret, NoBarrier: *noBarrier})
	}()
	if err != nil {
		log.Error(r.Name+" service failed", "err", err)
		stop()
		os.Exit(1)
	}
}

// RunParticipant serves c.Resource's ops through a [barrier.Barrier] in the pool's database
// (so duplicates, empty rollbacks and hanging tries or actions are handled in the business
// transaction, and requests not signed with c.Secret are refused), with c.Faults in front: POST
// /tcc takes try, confirm and cancel, POST /saga action and compensate (the op is in the request;
// another one is answered 400) — or, with c.Transport gRPC, the methods of the resource's shoppb
// service, behind the barrier's gRPC interceptor (grpcparticipant.go). It serves GET /healthz and
// GET /stats too, runs the barrier's purge, and blocks until ctx ends.
func RunParticipant(ctx context.Context, c ParticipantConfig) error {
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	bar, err := barrier.New(c.Pool, barrier.WithLogger(c.Log), barrier.WithSecrets(c.Secret),
		barrier.WithTelemetry(reg, nil))
	if err != nil {
		return err
	}
	if err := bar.Migrate(ctx); err != nil {
		return err
	}
	tccOps := []participant.Op{participant.OpTry, participant.OpConfirm, participant.OpCancel}
	sagaOps := []participant.Op{participant.OpAction, participant.OpCompensate}
	tccH := bar.Handler(c.Resource.Apply, barrier.WithAllowedOps(tccOps...))
	sagaH := bar.Handler(c.Resource.Apply, barrier.WithAllowedOps(sagaOps...))
	if c.NoBarrier {
		c.Log.Warn("running WITHOUT the participant barrier (and without checking signatures): duplicates and empty rollbacks will corrupt the data")
		tccH = unguarded(c.Log, c.Pool, c.Resource.Apply)
		sagaH = tccH
	}
	health := map[string]string{"status": "ok"}
	var grpcSrv *grpc.Server
	var grpcLn net.Listener
	if c.Transport == TransportGRPC {
		if grpcSrv, err = grpcServer(c, bar); err != nil {
			return err
		}
		if grpcLn, err = ListenGRPC(c.GRPCListen); err != nil {
			return err
		}
		defer grpcLn.Close()
		health["grpc"] = grpcLn.Addr().String()
	} else {
		mux.Handle("POST /tcc", c.Faults.endpoint(tccH, tccOps...))
		mux.Handle("POST /saga", c.Faults.endpoint(sagaH, sagaOps...))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		exapp.WriteJSON(w, 200, health)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		out, err := c.Resource.Totals(r.Context(), c.Pool)
		if err != nil {
			exapp.Fail(w, c.Log, http.StatusInternalServerError, "reading the totals failed", err)
			return
		}
		out["service"], out["faults"] = c.Resource.Name, c.Faults.Stats()
		exapp.WriteJSON(w, http.StatusOK, out)
	})
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return bar.Run(ctx) })
	g.Go(func() error { return exapp.Serve(ctx, c.Listen, mux) })
	if grpcSrv != nil {
		g.Go(func() error { return ServeGRPC(ctx, grpcLn, grpcSrv) })
	}
	c.Log.Info(c.Resource.Name+" service running", "transport", string(c.Transport), "faults", c.Faults.Enabled())
	return g.Wait()
}

// endpoint serves the ops of one protocol with h behind f's faults. It reads the op from the
// request (answering 400 for an op of another protocol) and hands h the request untouched.
func (f *Faults) endpoint(h http.Handler, ops ...participant.Op) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		var req participant.Request
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err == nil && !slices.Contains(ops, req.Op) {
			err = fmt.Errorf("op %s: this endpoint takes %v: %w", req.Op, ops, participant.ErrBadRequest)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.serve(w, r, req.Op, h)
	})
}

// unguarded serves the wire protocol like [barrier.Barrier.Handler] but without the barrier
// (nor signatures): every request runs do.
func unguarded(log *slog.Logger, pool *pgxpool.Pool, do func(ctx context.Context, tx pgx.Tx, req participant.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req participant.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error { return do(r.Context(), tx, req) })
		switch {
		case err == nil:
			exapp.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
		case errors.Is(err, participant.ErrRefused):
			http.Error(w, err.Error(), participant.StatusRefused)
		case errors.Is(err, participant.ErrBadRequest):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			exapp.Fail(w, log, http.StatusInternalServerError, "applying the op failed", err, "gid", req.GID, "branch", req.Branch, "op", req.Op.String())
		}
	})
}

// parseSeed reads "key=n,key=n" (the initial rows of a participant's table).
func parseSeed(s string) (map[string]int64, error) {
	out := map[string]int64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		var n int64
		if _, err := fmt.Sscan(v, &n); !ok || k == "" || err != nil {
			return nil, fmt.Errorf("seed %q: want key=number", kv)
		}
		out[k] = n
	}
	return out, nil
}
