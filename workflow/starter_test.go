package workflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/workflow"
)

// envStarter makes the test binary a starter process (see starter): its value is a starterConfig.
const envStarter = "TXKIT_WORKFLOW_STARTER"

const secret = "workflow-test-secret-0123456789"

// starterConfig is what a starter process is told.
type starterConfig struct {
	URL, Schema, Participants string
	GID, Workflow             string
	Kill                      string // "after:<n>": after step n returned; "in:pay": pay applied, not recorded; "sleep": while sleeping
}

// shop registers on c the workflow "shop" — stock (a call), quote (local), pay (a call whose
// payload carries the quote), ship (a call) — and "nap" — stock, a durable sleep of napFor, ship —
// calling the participants c has registered as stock, pay and ship. after, when set, is called
// after each step n returned.
func shop(c *workflow.Coordinator, parts map[string]participant.Participant, after func(n int)) error {
	if after == nil {
		after = func(int) {}
	}
	if err := workflow.Register(c, "shop", func(ctx workflow.Context, in order) (receipt, error) {
		if err := workflow.Call(ctx, "stock", parts["stock"], in); err != nil {
			return receipt{}, err
		}
		after(1)
		quote, err := workflow.Step(ctx, "quote", func(context.Context) (int, error) { return in.Qty*10 + len(in.Item), nil })
		if err != nil {
			return receipt{}, err
		}
		after(2)
		if err := workflow.Call(ctx, "pay", parts["pay"], payment{Reservation: "R-" + in.Item, Amount: quote}); err != nil {
			return receipt{}, err
		}
		after(3)
		if err := workflow.Call(ctx, "ship", parts["ship"], nil); err != nil {
			return receipt{}, err
		}
		after(4)
		return receipt{Reservation: "R-" + in.Item, Amount: quote}, nil
	}); err != nil {
		return err
	}
	return workflow.Register(c, "nap", func(ctx workflow.Context, in order) (int, error) {
		if err := workflow.Call(ctx, "stock", parts["stock"], in); err != nil {
			return 0, err
		}
		if err := workflow.Sleep(ctx, napFor); err != nil {
			return 0, err
		}
		return 1, workflow.Call(ctx, "ship", parts["ship"], nil)
	})
}

const napFor = 1500 * time.Millisecond

// participants registers stock, pay and ship on c as the signed HTTP participant at url (a
// barrier); wrap, when set, wraps each.
func participants(c *workflow.Coordinator, url string, wrap func(name string, p participant.Participant) participant.Participant) (map[string]participant.Participant, error) {
	client, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		return nil, err
	}
	parts := map[string]participant.Participant{}
	for _, n := range []string{"stock", "pay", "ship"} {
		var p participant.Participant = participant.HTTP{URL: url, Client: client}
		if wrap != nil {
			p = wrap(n, p)
		}
		if parts[n], err = c.Register(n, p); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// starter runs one workflow and SIGKILLs its process where cfg.Kill says.
func starter(arg string) error {
	var cfg starterConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := workflow.New(pool, coordinator.WithSchema(cfg.Schema), coordinator.WithLease(500*time.Millisecond))
	if err != nil {
		return err
	}
	kill := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); time.Sleep(time.Minute) }
	parts, err := participants(c, cfg.Participants, func(name string, p participant.Participant) participant.Participant {
		if cfg.Kill != "in:"+name {
			return p
		}
		return participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
			if err := p.Do(ctx, req); err != nil {
				return err
			}
			kill() // applied by the participant, not recorded
			return nil
		})
	})
	if err != nil {
		return err
	}
	if err := shop(c, parts, func(n int) {
		if cfg.Kill == fmt.Sprintf("after:%d", n) {
			kill()
		}
	}); err != nil {
		return err
	}
	if cfg.Kill == "sleep" {
		go func() { // once the sleep is recorded
			for {
				var n int
				_ = pool.QueryRow(ctx, `select count(*) from `+pgx.Identifier{cfg.Schema, "txkit_workflow_branch"}.Sanitize()+
					` where gid = $1 and branch = 'sleep'`, cfg.GID).Scan(&n)
				if n > 0 {
					kill()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	_, err = c.Start(ctx, cfg.Workflow, order{Item: "book", Qty: 3}, coordinator.WithGID(cfg.GID))
	return fmt.Errorf("not killed: %w", err)
}

// participantServer serves stock, pay and ship behind a signed barrier in the test's schema;
// every op applied is a row of effects (gid, branch, op, at), every request received a row of
// requests (gid, branch, op).
func participantServer(t *testing.T, e *env) string {
	t.Helper()
	bar, err := barrier.New(e.Schema.Pool, barrier.WithTable(e.Schema.Name, ""), barrier.WithSecrets(secret), barrier.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Schema.Pool.Exec(t.Context(), `create table effects (gid text, branch text, op text, at timestamptz default now());
		create table requests (gid text, branch text, op text)`); err != nil {
		t.Fatal(err)
	}
	h := bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		_, err := tx.Exec(ctx, `insert into effects (gid, branch, op) values ($1, $2, $3)`, req.GID, req.Branch, req.Op.String())
		return err
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req struct{ GID, Branch, Op string }
		if err == nil && json.Unmarshal(body, &req) == nil {
			_, err = e.Schema.Pool.Exec(r.Context(), `insert into requests values ($1, $2, $3)`, req.GID, req.Branch, req.Op)
		}
		if err != nil {
			http.Error(w, "test server: "+err.Error(), http.StatusInternalServerError)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// counts returns, for gid, how many rows of table (effects: ops applied; requests: received)
// each "op/branch" has.
func counts(t *testing.T, e *env, table, gid string) map[string]int {
	t.Helper()
	rows, err := e.Schema.Pool.Query(t.Context(), `select op || '/' || branch, count(*) from `+table+` where gid = $1 group by 1`, gid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var k string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIntegrationStarterKilledAfterEachStep: a starter process SIGKILLed after each of the four
// steps in turn — and once inside the pay call, after the participant applied it but before the
// answer was recorded — is resumed by the leader in this process: every step is applied once
// (the participants' barrier-protected effects) and the output is that of an uninterrupted run.
// A starter SIGKILLed during a durable sleep is resumed after the sleep ends.
func TestIntegrationStarterKilledAfterEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	url := participantServer(t, e)
	leader := e.leader()
	parts, err := participants(leader, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := shop(leader, parts, nil); err != nil {
		t.Fatal(err)
	}
	clean, err := leader.Start(t.Context(), "shop", order{Item: "book", Qty: 3})
	if err != nil {
		t.Fatalf("uninterrupted run: %v", err)
	}
	kills := []string{"after:1", "after:2", "after:3", "after:4", "in:pay", "sleep"}
	errs := make(chan error, len(kills))
	for _, k := range kills {
		go func() {
			wf := "shop"
			if k == "sleep" {
				wf = "nap"
			}
			cfg, _ := json.Marshal(starterConfig{URL: e.Schema.URL, Schema: e.Schema.Name, Participants: url, GID: "g-" + k, Workflow: wf, Kill: k})
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envStarter+"="+string(cfg))
			out, err := cmd.CombinedOutput()
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				errs <- fmt.Errorf("starter %s was not SIGKILLed: %v\n%s", k, err, out)
				return
			}
			errs <- nil
		}()
	}
	for range kills {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	testenv.Run(t, leader.Run)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, k := range kills {
		gid := "g-" + k
		out, err := leader.Wait(ctx, gid)
		if err != nil {
			t.Fatalf("%s: Wait: %v", k, err)
		}
		want := map[string]int{"action/stock": 1, "action/pay": 1, "action/ship": 1}
		if k == "sleep" {
			delete(want, "action/pay")
			var slept time.Time
			if err := e.Schema.Pool.QueryRow(ctx, `select to_timestamp((convert_from(payload, 'UTF8')::jsonb->>'until')::float8 / 1000) from `+
				`txkit_workflow_branch where gid = $1 and branch = 'sleep'`, gid).Scan(&slept); err != nil {
				t.Fatal(err)
			}
			var shipped time.Time
			if err := e.Schema.Pool.QueryRow(ctx, `select at from effects where gid = $1 and branch = 'ship'`, gid).Scan(&shipped); err != nil {
				t.Fatal(err)
			}
			if shipped.Before(slept) {
				t.Fatalf("shipped at %v, before the sleep's end %v", shipped, slept)
			}
		} else if string(out.Output) != string(clean.Output) {
			t.Fatalf("%s: output %s, want %s (uninterrupted)", k, out.Output, clean.Output)
		}
		if got := counts(t, e, "effects", gid); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: applied %v, want %v", k, got, want)
		}
		// A call recorded before the kill is not sent again; the one in flight is, with its identity.
		if k == "in:pay" {
			want["action/pay"] = 2
		}
		if got := counts(t, e, "requests", gid); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: received %v, want %v", k, got, want)
		}
	}
}
